#!/bin/sh
# Re-vendors what the browser tests inject into pages (tests/support/vendor) at the
# version given, from the npm registry:
#   scripts/vendor-test-assets.sh AXE_CORE_VERSION
# npm checks the tarball against the integrity the registry publishes; the version
# and integrity are written to tests/support/vendor/VERSIONS. Test code only: the
# control plane never serves it.
set -eu
axe=$1
vendor=$(cd "$(dirname "$0")/.." && pwd)/tests/support/vendor
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$vendor"
cd "$work"
npm pack --silent "axe-core@$axe" >/dev/null
mkdir a
tar xzf "axe-core-$axe.tgz" -C a
cp a/package/axe.min.js "$vendor/axe.min.js"
cp a/package/LICENSE "$vendor/axe-core.LICENSE"
{
    echo "# Vendored by scripts/vendor-test-assets.sh from the npm registry; the tarball's"
    echo "# integrity (as npm publishes it) was checked. The licence sits beside the file."
    echo "axe-core $axe $(npm view "axe-core@$axe" dist.integrity) MPL-2.0"
} > "$vendor/VERSIONS"
