# Stand-in for redis:7.4.2-bookworm where no image registry is reachable: Debian's redis-server
# (7.0) on the Debian stand-in base. scripts/compose-bases.sh builds it only when the pull fails.
# Not a Conch image: no healthcheck of its own (compose.yaml's redis-cli ping is the check).
ARG DEBIAN_IMAGE=debian:12.10-slim
FROM ${DEBIAN_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data /usr/local/etc/redis && chown redis:redis /data
LABEL org.opencontainers.image.description="Conch stand-in for the official redis image"
WORKDIR /data
# hadolint ignore=DL3066
USER redis
EXPOSE 6379
CMD ["redis-server"]
