#!/bin/sh
# Builds the local images the Docker tests start containers from (no registry is
# needed), base first:
#   berth-test-base      a Debian minbase root made by debootstrap, imported into the engine
#   berth-test-postgres  images/postgres: Debian's PostgreSQL with the official postgres
#                        image's conventions (stands in for CP_POSTGRES_IMAGE)
#   berth-test-erp       images/erp: a small server with the official odoo image's
#                        conventions (stands in for CP_ERP_IMAGE)
#   berth-test-proxy     images/proxy: Debian's Caddy with the official caddy image's
#                        conventions (stands in for CP_PROXY_IMAGE)
#   berth-test-redis     images/redis: Debian's Redis (stands in for the `redis` image)
#   berth-test-haproxy   images/haproxy: Debian's HAProxy (stands in for `haproxy`)
#   berth-control-plane  images/control-plane on the base, by build-control-plane-image.sh
#                        (tagged by a hash of the sources; PYTHON builds the wheels)
# Each tag is a hash of its inputs (this file, plus images/<name>/ for the three built
# with `docker build` on the base), so a re-run with unchanged inputs skips the build;
# `<name>:latest` always points at the current one.
# Prints the image names on stdout, one a line; progress goes to stderr.
#   BERTH_DEBIAN_MIRROR: Debian mirror (default: the host's APT source, else deb.debian.org)
set -eu

NAME=berth-test-base
SUITE=bookworm
PACKAGES=python3,python3-venv,curl,ca-certificates,procps
IMAGES_DIR=$(cd "$(dirname "$0")/../images" && pwd)

SCRIPT_SUM=$(sha256sum < "$0")
HASH=$(printf '%s\n' "$SCRIPT_SUM" | cut -c1-12)
IMAGE="$NAME:$HASH"

if ! docker info >/dev/null 2>&1; then
    echo "error: the Docker engine is not reachable (run: scripts/start-dockerd.sh)" >&2
    exit 1
fi

# Concurrent runs wait for each other instead of building twice.
exec 9>"${TMPDIR:-/tmp}/berth-test-images.lock"
flock -w 900 9 || { echo "error: timed out waiting for another image build" >&2; exit 1; }

build_base() {
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
    rm -rf "$ROOT"
    trap - EXIT INT TERM
}

# prune NAME TAG: builds of older inputs are of no further use (one a container still
# uses, or that another image is built on, stays).
prune() {
    docker images --format '{{.Repository}}:{{.Tag}}' "$1" |
        grep -v -e ":$2\$" -e ':latest$' | xargs -r docker rmi >/dev/null 2>&1 || true
}

# build_image NAME DIR: `docker build` of images/DIR on the base image.
build_image() {
    tag=$(cd "$IMAGES_DIR" && { printf '%s\n' "$SCRIPT_SUM";
        find "$2" -type f -not -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum; } |
        sha256sum | cut -c1-12)
    if ! docker image inspect "$1:$tag" >/dev/null 2>&1; then
        echo "building $1:$tag from images/$2 on $IMAGE" >&2
        # Host network: apt in the build reaches whatever mirror the host reaches.
        docker build --network host --force-rm --build-arg "BASE=$IMAGE" \
            --label "berth.test-image=$1" -t "$1:$tag" "$IMAGES_DIR/$2" >&2 || {
            echo "error: building $1:$tag failed" >&2
            exit 1
        }
    fi
    docker tag "$1:$tag" "$1:latest"
    prune "$1" "$tag"
    echo "$1:$tag"
}

docker image inspect "$IMAGE" >/dev/null 2>&1 || build_base
docker tag "$IMAGE" "$NAME:latest"
echo "$IMAGE"
build_image berth-test-postgres postgres
build_image berth-test-erp erp
build_image berth-test-proxy proxy
build_image berth-test-redis redis
build_image berth-test-haproxy haproxy
"$(dirname "$0")/build-control-plane-image.sh" "$IMAGE"
prune "$NAME" "$HASH"  # last: the older images built on it are gone by now
