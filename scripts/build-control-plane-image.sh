#!/bin/sh
# Builds the control-plane image (images/control-plane) from this checkout:
#   scripts/build-control-plane-image.sh [BASE_IMAGE]
# BASE_IMAGE defaults to python:3.11-slim-bookworm; the tests pass berth-test-base
# (no registry is reachable there). The wheels (berth and its dependencies) are
# built here with this machine's pip, so the image build needs no package index.
# The tag is a hash of the sources, the Dockerfile and the base image, so a re-run
# with nothing changed builds nothing; `berth-control-plane:latest` points at it.
# Prints the image name on stdout; progress goes to stderr.
#   PYTHON: the Python that builds the wheels (default python3)
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE=${1:-python:3.11-slim-bookworm}
PYTHON=${PYTHON:-python3}
NAME=berth-control-plane

BASE_ID=$(docker image inspect --format '{{.Id}}' "$BASE" 2>/dev/null) || {
    echo "error: the base image $BASE is not in the engine" >&2
    exit 1
}
TAG=$(cd "$ROOT" && {
    echo "$BASE_ID"
    sha256sum < "$0"
    find pyproject.toml README.md agent protocol control_plane berthctl images/control-plane \
        -name __pycache__ -prune -o -type f ! -name '*.pyc' -print | LC_ALL=C sort | xargs sha256sum
} | sha256sum | cut -c1-12)

if ! docker image inspect "$NAME:$TAG" >/dev/null 2>&1; then
    CONTEXT=$(mktemp -d "${TMPDIR:-/tmp}/berth-image.XXXXXX")
    trap 'rm -rf "$CONTEXT"' EXIT INT TERM
    echo "building $NAME:$TAG on $BASE" >&2
    cp "$ROOT/images/control-plane/Dockerfile" "$CONTEXT/"
    # From a copy: setuptools leaves build/ and *.egg-info beside the sources.
    mkdir "$CONTEXT/src"
    (cd "$ROOT" && tar -c --exclude=__pycache__ --exclude='*.pyc' \
        pyproject.toml README.md agent protocol control_plane berthctl) | tar -C "$CONTEXT/src" -x
    "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps \
        --wheel-dir "$CONTEXT/wheels" "$CONTEXT/src" >&2
    # The dependencies as the image's own Python resolves them (markers such as
    # python_full_version), binary wheels only: pip run in the base image, trusting
    # the CA bundle this machine's pip trusts.
    CA=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
    docker run --rm --network host -v "$CONTEXT/wheels:/wheels" -v "$CA:/tmp/ca.pem:ro" \
        -e PIP_CERT=/tmp/ca.pem -e PIP_DISABLE_PIP_VERSION_CHECK=1 --entrypoint sh "$BASE" \
        -c 'python3 -m venv /tmp/venv && /tmp/venv/bin/pip download --quiet \
            --only-binary=:all: --dest /wheels "$(ls /wheels/berth-*.whl)[server]"' >&2
    docker build --network none --force-rm --build-arg "BASE=$BASE" \
        --label "berth.image-sources=$TAG" -t "$NAME:$TAG" "$CONTEXT" >&2 || {
        echo "error: building $NAME:$TAG failed" >&2
        exit 1
    }
fi
docker tag "$NAME:$TAG" "$NAME:latest"
# Builds of older sources are of no further use (one in use by a container stays).
docker images --format '{{.Repository}}:{{.Tag}}' "$NAME" |
    grep -v -e ":$TAG\$" -e ':latest$' | xargs -r docker rmi >/dev/null 2>&1 || true
echo "$NAME:$TAG"
