#!/bin/sh
# Starts the Docker engine in the background when it is not already answering,
# then waits (bounded) until `docker info` works. Safe to run again.
#   BERTH_DOCKERD_LOG: where dockerd writes (default /var/log/berth-dockerd.log)
#   BERTH_DOCKERD_WAIT: seconds to wait for the engine (default 30)
set -eu

LOG=${BERTH_DOCKERD_LOG:-/var/log/berth-dockerd.log}
WAIT=${BERTH_DOCKERD_WAIT:-30}

engine_up() { docker info >/dev/null 2>&1; }

if engine_up; then
    exit 0
fi

DOCKERD=$(command -v dockerd 2>/dev/null || true)
[ -n "$DOCKERD" ] || [ ! -x /usr/sbin/dockerd ] || DOCKERD=/usr/sbin/dockerd
if [ -z "$DOCKERD" ]; then
    echo "error: dockerd is not installed (run: scripts/ensure-system-deps.sh test)" >&2
    exit 1
fi

# An engine that is running already (perhaps still starting) is not started twice.
if ! pgrep -x dockerd >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
            echo "error: the Docker engine is not running and starting it needs root (or sudo)" >&2
            exit 1
        fi
    else
        SUDO=
    fi
    $SUDO mkdir -p "$(dirname "$LOG")"
    # An engine killed without cleaning up leaves its pid file; its pid may be reused.
    $SUDO rm -f /var/run/docker.pid
    # Likewise the managed containerd's pid file: dockerd trusts any live process with
    # that pid and then waits forever for a socket nobody will open.
    CPID_FILE=/var/run/docker/containerd/containerd.pid
    if [ -f "$CPID_FILE" ]; then
        CPID=$(cat "$CPID_FILE" 2>/dev/null || true)
        if [ -z "$CPID" ] || [ "$(cat "/proc/$CPID/comm" 2>/dev/null)" != containerd ]; then
            $SUDO rm -f "$CPID_FILE"
        fi
    fi
    echo "starting dockerd (log: $LOG)" >&2
    # setsid: the engine outlives this script and the make (or CI) process group.
    $SUDO sh -c "setsid '$DOCKERD' >>'$LOG' 2>&1 </dev/null &"
fi

i=0
while [ "$i" -lt "$WAIT" ]; do
    if engine_up; then
        echo "docker engine is up" >&2
        exit 0
    fi
    sleep 1
    i=$((i + 1))
done

echo "error: the Docker engine did not answer within ${WAIT}s; see $LOG" >&2
docker info 2>&1 >/dev/null | tail -n 5 >&2 || true
tail -n 20 "$LOG" >&2 2>/dev/null || true
exit 1
