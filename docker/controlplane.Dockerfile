# syntax=docker/dockerfile:1.7
# Conch xDS control plane: tells Envoy which gateways are live (grpcio + xds-protos).
# Build from the repository root:  docker build -f docker/controlplane.Dockerfile -t conch-controlplane .
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
# grpcio and xds-protos only: the image has no Envoy binary (Envoy runs in its own image).
RUN /opt/conch/bin/pip install --no-cache-dir --constraint /tmp/constraints.txt . \
 && /opt/conch/bin/pip install --no-cache-dir --constraint /tmp/constraints.txt grpcio xds-protos

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 conch \
 && useradd --system --uid 10001 --gid conch --no-create-home --shell /usr/sbin/nologin conch
COPY --from=build /opt/conch /opt/conch
COPY controlplane /app/controlplane
COPY docker/healthcheck.py /usr/local/bin/conch-healthcheck
WORKDIR /app
ENV PATH=/opt/conch/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CONCH_CONTROLPLANE_XDS_PORT=18000 \
    CONCH_CONTROLPLANE_HEALTH_PORT=8030 \
    CONCH_HEALTHCHECK_URL=http://127.0.0.1:8030/v2/health/ready
USER 10001:10001
EXPOSE 18000 8030
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "/usr/local/bin/conch-healthcheck"]
ENTRYPOINT ["python", "-m", "controlplane"]
