# Two commands for a fresh machine (Debian, Python 3.11, root):
#   make demo   install everything, then run the main job on the embedded default
#   make test   install everything, then run the whole test suite
# Both are idempotent: a second run reinstalls nothing that is already there.

PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
BUILD := build
PACKAGED_ROM := odyssey_core/envs/pyboy/roms/odland.gb
BUILT_ROM := $(BUILD)/odland.gb
DEMO_OUT ?= out
# sdcc builds the odland ROM; cmake, g++ and make compile the alfworld extra's engines
# (fast-downward-textworld and jericho ship as source); chromium (headless, driven by Playwright
# at /usr/bin/chromium) and chromium-driver render the persona app in a real browser for the
# renderer parity check. No tool downloads a browser of its own. curl sends README's example
# request to a served model.
APT_PACKAGES := sdcc cmake g++ make chromium chromium-driver curl
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.odyssey-installed
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export GX_ANALYTICS_ENABLED := false

.PHONY: demo test setup system-deps rom rom-check rom-update lint format bench clean

# The search expert finishes odland 1-1 on video, then the whole Odysseus pipeline runs as the
# train-odysseus Prefect flow on configs/odysseus/pipeline/demo.yaml: curate -> SFT -> RL ->
# evaluate -> promote, sized so that the tiny model learns enough on a CPU to become the first
# champion.
DEMO_PRESET ?= demo
DEMO_RUN := out/pipeline/odland-$(DEMO_PRESET)
# One thread per process: the tiny model's matmuls are too small to share, and on a busy
# 2-core machine threads waiting on each other make them many times slower.
demo: export OMP_NUM_THREADS = 1
demo: setup
	$(VENV)/bin/odyssey play odland-1-1 --agent expert --video $(DEMO_OUT)/demo-odland-1-1.mp4
	PREFECT_HOME=$(CURDIR)/out/prefect-home PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=180 \
	  $(PY) -m flows.odysseus --preset $(DEMO_PRESET)
	@echo
	@echo "Where to look:"
	@echo "  expert video:    $(DEMO_OUT)/demo-odland-1-1.mp4"
	@echo "  pipeline run:    $(DEMO_RUN)/ (stage folders, artifacts/, evaluate/ report)"
	@echo "  report (base, sft, candidate):" $(DEMO_RUN)/evaluate/*/report/report.md
	@echo "  MLflow UI:       $(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(DEMO_RUN)/mlflow.db"
	@echo "  model registry:  $(VENV)/bin/odyssey registry --tracking-uri sqlite:///$(DEMO_RUN)/mlflow.db list"

test: setup rom-check lint
	$(PY) -m pytest

setup: system-deps $(STAMP)

# Debian packages: only what is missing, with one `apt-get update` when needed.
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO="sudo"; \
	  echo "installing Debian packages:$$missing"; \
	  $$SUDO apt-get install -y --no-install-recommends $$missing \
	    || { $$SUDO apt-get update && $$SUDO apt-get install -y --no-install-recommends $$missing; }; \
	fi

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The package, its dev tools and the alfworld, deepspeed and espo extras, reinstalled when
# pyproject.toml or this Makefile changes (so an existing venv picks up a new install line).
# DeepSpeed is pure Python on the CPU; the tests run its ZeRO-2 path single-process on gloo.
# torch comes first and pinned: that is the CPU build; an unpinned torch would pull a multi-GB
# CUDA build. The alfworld extra compiles Fast Downward and Jericho the first time (minutes).
$(STAMP): pyproject.toml Makefile | $(PY)
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e '.[dev,alfworld,deepspeed,espo]'
	touch $@

# Rebuild the open ROM from C and fail when it differs from the one the package ships.
rom: system-deps
	$(MAKE) -C roms/odland OUT=$(abspath $(BUILT_ROM))

rom-check: rom
	@cmp $(BUILT_ROM) $(PACKAGED_ROM) \
	  || { echo "odland: $(BUILT_ROM) differs from $(PACKAGED_ROM); after changing roms/odland, run 'make rom-update'"; exit 1; }
	@echo "odland ROM: rebuilt from source, identical to the packaged one"

rom-update: rom
	cp $(BUILT_ROM) $(PACKAGED_ROM)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: setup
	$(PY) bench/env_throughput.py

clean:
	rm -rf $(BUILD) roms/odland/build .pytest_cache .ruff_cache
