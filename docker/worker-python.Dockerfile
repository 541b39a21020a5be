# Conch worker, Python backend (Triton-compatible model.py), CPU.
# Derives from the base image (docker/base.Dockerfile: Python + Conch's dependencies), which is
# built first:  docker compose --profile base build base
# Build from the repository root:  docker build -f docker/worker-python.Dockerfile -t conch/worker-python:0.1.0 .
ARG BASE_IMAGE=conch/base:0.1.0

# Conch's own wheel, built from the source (the dependencies are the base image's already).
FROM ${BASE_IMAGE} AS build
# The build stage only: its wheel is all the runtime stage takes from it.
# hadolint ignore=DL3002
USER 0
WORKDIR /src
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY conch ./conch
COPY gateway ./gateway
COPY scheduler ./scheduler
COPY workers ./workers
RUN conch-pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

FROM ${BASE_IMAGE} AS runtime
# Root to install, then the conch user again (below).
USER 0
COPY docker/constraints.txt /tmp/constraints.txt
# torch too: Python-backend models may import it (the generative ones, tiny_gpt, do). The layer
# is the PyTorch worker's, instruction for instruction, so the two images share it.
# torch's version comes from the constraints; its build from this index: PyTorch's CPU index by
# default (no CUDA libraries). Where only PyPI is reachable, TORCH_INDEX_URL=https://pypi.org/simple
# (compose: CONCH_TORCH_INDEX_URL) installs PyPI's torch, which carries CUDA's libraries (GBs).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN --mount=type=secret,id=ca \
    conch-pip install --index-url "${TORCH_INDEX_URL}" --constraint /tmp/constraints.txt torch \
 && conch-pip install --constraint /tmp/constraints.txt -r /opt/conch/requirements/torch.txt
# The source last: a code change rebuilds only this small layer.
COPY --from=build /wheels /tmp/wheels
RUN conch-pip install --no-deps --no-index --constraint /tmp/constraints.txt /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels
# Python-based backends (backend: "NAME" -> <dir>/NAME/model.py; docs/backends/python-based.md):
# Triton's directory first (mount a user's backends there, as with Triton), then Conch's examples.
COPY examples/backends /opt/conch/backends
ENV CONCH_WORKER_BACKEND=python \
    CONCH_WORKER_BACKEND_DIRECTORY=/opt/tritonserver/backends:/opt/conch/backends \
    CONCH_WORKER_MODEL_REPOSITORY=/models \
    CONCH_WORKER_HEALTH_PORT=8020 \
    CONCH_HEALTHCHECK_URL=http://127.0.0.1:8020/v2/health/ready
USER 10001:10001
EXPOSE 8020
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "/usr/local/bin/conch-healthcheck"]
ENTRYPOINT ["conch", "worker", "--backend", "python"]
