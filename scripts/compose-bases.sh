#!/usr/bin/env bash
# The images compose.yaml and the Dockerfiles start from but do not build: pulled where a
# registry answers; otherwise built here as stand-ins from Debian packages, under the same
# names, so `docker compose build` and `up` find them locally:
#   python:3.11.11-slim-bookworm, debian:12.10-slim  debootstrap (minbase) + Python 3.11
#   redis:7.4.2-bookworm                             Debian's redis-server (7.0)
#   prom/prometheus:v2.55.1                          Debian's prometheus (2.42)
# A stand-in is labelled as one (org.opencontainers.image.description). Grafana has no
# stand-in: its service is in the `grafana` profile. An image already present is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
PYTHON_IMAGE=python:3.11.11-slim-bookworm
DEBIAN_IMAGE=debian:12.10-slim
REDIS_IMAGE=redis:7.4.2-bookworm
PROMETHEUS_IMAGE=prom/prometheus:v2.55.1
PULL_TIMEOUT=${CONCH_PULL_TIMEOUT:-60}

say() { echo "compose-bases: $*" >&2; }
present() { docker image inspect "$1" >/dev/null 2>&1; }
pull() { timeout "$PULL_TIMEOUT" docker pull -q "$1" >/dev/null 2>&1; }

debian_standin() {
    say "building the Debian stand-in for $PYTHON_IMAGE and $DEBIAN_IMAGE (debootstrap)"
    command -v debootstrap >/dev/null || {
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    }
    local root
    root=$(mktemp -d /tmp/conch-rootfs.XXXXXX)
    $SUDO debootstrap --variant=minbase \
        --include=python3,python3-venv,python-is-python3,ca-certificates \
        bookworm "$root" "${CONCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >/dev/null
    $SUDO chroot "$root" apt-get clean
    $SUDO rm -rf "$root"/var/lib/apt/lists/*
    $SUDO tar -C "$root" -c . | docker import \
        -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' \
        -c 'LABEL org.opencontainers.image.description="Conch stand-in: Debian bookworm minbase + Python 3.11"' \
        - conch-standin/python:3.11-bookworm >/dev/null
    $SUDO rm -rf "$root"
    present "$PYTHON_IMAGE" || docker tag conch-standin/python:3.11-bookworm "$PYTHON_IMAGE"
    present "$DEBIAN_IMAGE" || docker tag conch-standin/python:3.11-bookworm "$DEBIAN_IMAGE"
}

need_debian=
for image in "$PYTHON_IMAGE" "$DEBIAN_IMAGE"; do
    present "$image" || pull "$image" || need_debian=1
done
[ -z "$need_debian" ] || debian_standin

for pair in "$REDIS_IMAGE:redis" "$PROMETHEUS_IMAGE:prometheus"; do
    image=${pair%:*}
    name=${pair##*:}
    if ! present "$image" && ! pull "$image"; then
        say "no registry for $image: building the stand-in (docker/standins/$name.Dockerfile)"
        docker build -q --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE" \
            -f "docker/standins/$name.Dockerfile" -t "$image" docker/standins >/dev/null
    fi
done
say "base images present: $PYTHON_IMAGE $DEBIAN_IMAGE $REDIS_IMAGE $PROMETHEUS_IMAGE"
