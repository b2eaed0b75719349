#!/bin/sh
# Installs the Debian packages a target needs, only when they are missing.
#   venv: what `python3 -m venv` needs
#   test: PostgreSQL and Redis servers (the tests start their own instances), the
#         Docker engine, debootstrap (builds the local test images), Chromium
#         (renders the API docs pages), zstd (the agent's backups compress with it) and
#         pebble (the ACME server the proxy gets certificates from in tests),
#         docker-compose (deploy/compose.yaml run on one machine without a Swarm),
#         openssh-server (a real sshd: the servers reached over SSH)
set -eu

apt_install() {
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
            echo "error: need root (or sudo) to install: $*" >&2; exit 1
        fi
    else
        SUDO=
    fi
    if [ ! -f /tmp/.berth-apt-updated ]; then
        $SUDO apt-get update -qq && touch /tmp/.berth-apt-updated
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

case "${1:-}" in
venv)
    python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
    ;;
test)
    missing=""
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$missing postgresql"
    command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
    # Both live in /usr/sbin, which a non-root PATH may lack.
    command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || missing="$missing docker.io"
    command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] ||
        missing="$missing debootstrap"
    # Headless browser for the API docs pages test.
    command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
    command -v zstd >/dev/null 2>&1 || missing="$missing zstd"
    # A real ACME server for the environments' HTTPS certificates.
    command -v pebble >/dev/null 2>&1 || missing="$missing pebble"
    command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
    [ -x /usr/sbin/sshd ] || missing="$missing openssh-server"
    [ -z "$missing" ] || apt_install $missing
    ;;
*)
    echo "usage: $0 venv|test" >&2; exit 2
    ;;
esac
