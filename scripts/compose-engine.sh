#!/usr/bin/env bash
# A Docker engine that answers, with Compose v2 as its CLI plugin, for `make compose-test`.
# Nothing is done where `docker info` and `docker compose version` already work. Otherwise, on
# Debian/Ubuntu: Debian's docker.io (dockerd, containerd, runc) is installed if missing and
# dockerd is started in the background (log: /var/log/conch-dockerd.log; data under the
# default /var/lib/docker); Compose v2 comes from Debian trixie's docker-compose package
# (pinned at priority 100, so nothing else is taken from trixie): bookworm's docker-compose is
# the old 1.29 Python tool.
set -euo pipefail
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

say() { echo "compose-engine: $*" >&2; }

apt_install() {
    if [ -z "${APT_UPDATED:-}" ]; then
        $SUDO apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v dockerd >/dev/null; then
    say "installing docker.io"
    apt_install docker.io iptables
fi

if ! docker info >/dev/null 2>&1; then
    say "starting dockerd"
    if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
        $SUDO systemctl start docker
    else
        $SUDO sh -c 'nohup dockerd >/var/log/conch-dockerd.log 2>&1 &'
    fi
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { say "dockerd did not answer (see /var/log/conch-dockerd.log)"; exit 1; }
fi

compose_v2() {
    docker compose version --short 2>/dev/null | grep -qE '^v?2\.'
}
if ! compose_v2; then
    say "installing Compose v2 (docker-compose from Debian trixie)"
    if ! apt-cache policy docker-compose 2>/dev/null | grep -q ' 2\.[0-9]'; then
        $SUDO tee /etc/apt/sources.list.d/conch-trixie.sources >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        $SUDO tee /etc/apt/preferences.d/conch-trixie >/dev/null <<'PIN'
Package: *
Pin: release n=trixie
Pin-Priority: 100
PIN
        APT_UPDATED=
    fi
    apt_install -t trixie docker-compose
    compose_v2 || { say "docker compose is still not v2"; exit 1; }
fi
say "$(docker version --format 'engine {{.Server.Version}}') / compose $(docker compose version --short)"
