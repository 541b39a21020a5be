# Conch worker, FIL backend on the CPU (XGBoost, LightGBM, scikit-learn and Treelite tree models).
# Derives from the base image (docker/base.Dockerfile: Python + Conch's dependencies), which is
# built first:  docker compose --profile base build base
# Build from the repository root:  docker build -f docker/worker-fil.Dockerfile -t conch/worker-fil:0.1.0 .
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
# LightGBM's wheel links the GNU OpenMP runtime, which the slim Python image lacks.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=secret,id=ca \
    conch-pip install --constraint /tmp/constraints.txt -r /opt/conch/requirements/fil.txt
# The source last: a code change rebuilds only this small layer.
COPY --from=build /wheels /tmp/wheels
RUN conch-pip install --no-deps --no-index --constraint /tmp/constraints.txt /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels
ENV CONCH_WORKER_BACKEND=fil \
    CONCH_WORKER_MODEL_REPOSITORY=/models \
    CONCH_WORKER_HEALTH_PORT=8020 \
    CONCH_HEALTHCHECK_URL=http://127.0.0.1:8020/v2/health/ready
USER 10001:10001
EXPOSE 8020
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "/usr/local/bin/conch-healthcheck"]
ENTRYPOINT ["conch", "worker", "--backend", "fil"]
