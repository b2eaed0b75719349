#!/bin/sh
# Builds the local image the Docker tests start containers from (no registry is
# needed): a Debian minbase root made by debootstrap, imported into the engine.
# The tag is a hash of this file, so a re-run with an unchanged script skips the
# build; `berth-test-base:latest` always points at the current one.
# Prints the image name on stdout; progress goes to stderr.
#   BERTH_DEBIAN_MIRROR: Debian mirror (default: the host's APT source, else deb.debian.org)
set -eu

NAME=berth-test-base
SUITE=bookworm
PACKAGES=python3,python3-venv,curl,ca-certificates,procps

HASH=$(sha256sum "$0" | cut -c1-12)
IMAGE="$NAME:$HASH"

if ! docker info >/dev/null 2>&1; then
    echo "error: the Docker engine is not reachable (run: scripts/start-dockerd.sh)" >&2
    exit 1
fi

# Concurrent runs wait for each other instead of building twice.
exec 9>"${TMPDIR:-/tmp}/berth-test-images.lock"
flock -w 900 9 || { echo "error: timed out waiting for another image build" >&2; exit 1; }

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    docker tag "$IMAGE" "$NAME:latest"
    echo "$IMAGE"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "error: building $IMAGE with debootstrap needs root" >&2
    exit 1
fi
command -v debootstrap >/dev/null 2>&1 || {
    echo "error: debootstrap is not installed (run: scripts/ensure-system-deps.sh test)" >&2
    exit 1
}

host_mirror() {
    # The first Debian archive URI of the host's APT sources (one-line or deb822 style),
    # skipping the security archive.
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources 2>/dev/null |
        sed -n -e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\).*/\2/p' \
               -e 's/^URIs:[[:space:]]*//p' |
        tr ' ' '\n' | grep -E '^https?://.*/debian/?$' | head -n 1
}
MIRROR=${BERTH_DEBIAN_MIRROR:-$(host_mirror || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/berth-test-base.XXXXXX")
trap 'rm -rf "$ROOT"' EXIT INT TERM

echo "building $IMAGE from $MIRROR ($SUITE, minbase)" >&2
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR" >&2 || {
    echo "error: debootstrap failed (see $ROOT/debootstrap/debootstrap.log)" >&2
    cat "$ROOT/debootstrap/debootstrap.log" >&2 2>/dev/null || true
    exit 1
}

# Keep it small: no package lists, caches, documentation or translations.
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/* "$ROOT"/var/log/* \
       "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* \
       "$ROOT"/usr/share/locale/* "$ROOT"/tmp/*

tar --numeric-owner -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/sh"]' \
    --message "berth test base ($SUITE minbase: $PACKAGES)" - "$IMAGE" >/dev/null
docker tag "$IMAGE" "$NAME:latest"
echo "$IMAGE"
