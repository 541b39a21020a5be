# Stand-in for prom/prometheus:v2.55.1 where no image registry is reachable: Debian's prometheus
# (2.42) and wget (compose.yaml's healthcheck) on the Debian stand-in base.
# scripts/compose-bases.sh builds it only when the pull fails.
ARG DEBIAN_IMAGE=debian:12.10-slim
FROM ${DEBIAN_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus wget \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /prometheus && chown nobody:nogroup /prometheus
LABEL org.opencontainers.image.description="Conch stand-in for the official prometheus image"
WORKDIR /prometheus
# hadolint ignore=DL3066
USER nobody
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
