# Conch worker, PyTorch backend on NVIDIA GPUs (torch CUDA wheel with its own CUDA libraries).
# Needs the NVIDIA driver and the NVIDIA Container Toolkit on the host (see docs/deployment.md).
# Build from the repository root:  docker build -f docker/worker-pytorch-gpu.Dockerfile -t conch-worker-pytorch-gpu .
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-base-ubuntu24.04

FROM ${CUDA_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
# The CUDA image's tag pins the Ubuntu release; its archive supplies the matching Python.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python3 -m venv /opt/conch
COPY docker/constraints.txt /tmp/constraints.txt
COPY docker/conch-pip /usr/local/bin/conch-pip
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY conch ./conch
COPY gateway ./gateway
COPY scheduler ./scheduler
COPY workers ./workers
# torch's version comes from the constraints (PyPI's build of it is the CUDA one).
RUN --mount=type=secret,id=ca \
    conch-pip install --constraint /tmp/constraints.txt torch \
 && conch-pip install --constraint /tmp/constraints.txt ".[torch,gpu]"

FROM ${CUDA_IMAGE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 conch \
 && useradd --system --uid 10001 --gid conch --no-create-home --shell /usr/sbin/nologin conch
COPY --from=build /opt/conch /opt/conch
COPY docker/healthcheck.py /usr/local/bin/conch-healthcheck
ENV PATH=/opt/conch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    CONCH_WORKER_BACKEND=pytorch \
    CONCH_WORKER_MODEL_REPOSITORY=/models \
    CONCH_WORKER_HEALTH_PORT=8020 \
    CONCH_HEALTHCHECK_URL=http://127.0.0.1:8020/v2/health/ready
USER 10001:10001
EXPOSE 8020
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD ["python", "/usr/local/bin/conch-healthcheck"]
ENTRYPOINT ["conch", "worker", "--backend", "pytorch"]
