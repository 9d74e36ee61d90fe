# Odyssey runtime image: the package with its packaged odland ROM (no compiler needed).
# GPU images add the `deepspeed` / `vllm` extras on a CUDA base; this one is the CPU default.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    MLFLOW_DISABLE_TELEMETRY=true \
    GX_ANALYTICS_ENABLED=false

WORKDIR /opt/odyssey
COPY pyproject.toml README.md DESIGN.md ./
COPY odyssey_core ./odyssey_core
COPY configs ./configs
COPY flows ./flows
COPY tasks ./tasks
COPY prefect.yaml ./
# torch first, pinned; TORCH_SPEC (pip arguments, left unquoted so an index can come with it)
# picks the build. The default keeps the CPU image; a CUDA image for the odyssey-gpu pool
# (infra/k8s-work-pool.json), e.g.:
#   docker build --build-arg TORCH_SPEC="torch==2.13.0 --index-url \
#     https://download.pytorch.org/whl/cu128" -t odyssey:cuda .
# EXTRAS adds optional extras, e.g. --build-arg EXTRAS=alfworld,deepspeed; alfworld compiles
# its planners from source, so the compilers come along only when extras are asked for.
ARG TORCH_SPEC=torch==2.13.0
ARG EXTRAS=""
RUN if [ -n "$EXTRAS" ]; then apt-get update \
      && apt-get install -y --no-install-recommends g++ cmake make \
      && rm -rf /var/lib/apt/lists/*; fi
RUN pip install --upgrade pip && pip install $TORCH_SPEC && pip install ".${EXTRAS:+[$EXTRAS]}"

# Presets are looked up here when the package is installed outside the repository.
ENV ODYSSEY_CONFIG_DIR=/opt/odyssey/configs \
    ODYSSEY_HOME=/opt/odyssey \
    PYTHONPATH=/opt/odyssey
ENTRYPOINT ["odyssey"]
CMD ["--help"]
