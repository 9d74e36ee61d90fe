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
# torch first and pinned to the CPU build; a GPU image swaps this line for a CUDA build.
RUN pip install --upgrade pip && pip install torch==2.13.0 && pip install .

# Presets are looked up here when the package is installed outside the repository.
ENV ODYSSEY_CONFIG_DIR=/opt/odyssey/configs \
    ODYSSEY_HOME=/opt/odyssey \
    PYTHONPATH=/opt/odyssey
ENTRYPOINT ["odyssey"]
CMD ["--help"]
