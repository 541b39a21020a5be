# syntax=docker/dockerfile:1.7
# Conch worker, PyTorch backend on the CPU (CPU-only torch wheel, no CUDA libraries).
# Build from the repository root:  docker build -f docker/worker-pytorch.Dockerfile -t conch-worker-pytorch .
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/conch
COPY docker/constraints.txt /tmp/constraints.txt
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY conch ./conch
COPY gateway ./gateway
COPY scheduler ./scheduler
COPY workers ./workers
# torch's version comes from the constraints; its CPU build from this index.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN /opt/conch/bin/pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" --constraint /tmp/constraints.txt torch \
 && /opt/conch/bin/pip install --no-cache-dir --constraint /tmp/constraints.txt ".[torch]"

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 conch \
 && useradd --system --uid 10001 --gid conch --no-create-home --shell /usr/sbin/nologin conch
COPY --from=build /opt/conch /opt/conch
COPY docker/healthcheck.py /usr/local/bin/conch-healthcheck
ENV PATH=/opt/conch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CONCH_WORKER_BACKEND=pytorch \
    CONCH_WORKER_MODEL_REPOSITORY=/models \
    CONCH_WORKER_HEALTH_PORT=8020 \
    CONCH_HEALTHCHECK_URL=http://127.0.0.1:8020/v2/health/ready
USER 10001:10001
EXPOSE 8020
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "/usr/local/bin/conch-healthcheck"]
ENTRYPOINT ["conch", "worker", "--backend", "pytorch"]
