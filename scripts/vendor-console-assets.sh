#!/bin/sh
# Re-vendors the web console's scripts (control_plane/console/static/vendor) at the
# versions given, from the npm registry:
#   scripts/vendor-console-assets.sh HTMX_VERSION UPLOT_VERSION
# npm checks each tarball against the integrity the registry publishes; the
# versions and integrities are written to static/vendor/VERSIONS.
set -eu
htmx=$1 uplot=$2
vendor=$(cd "$(dirname "$0")/.." && pwd)/control_plane/console/static/vendor
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$vendor"
cd "$work"
npm pack --silent "htmx.org@$htmx" "uplot@$uplot" >/dev/null
mkdir h u
tar xzf "htmx.org-$htmx.tgz" -C h
tar xzf "uplot-$uplot.tgz" -C u
cp h/package/dist/htmx.min.js "$vendor/htmx.min.js"
cp h/package/LICENSE "$vendor/htmx.LICENSE"
cp u/package/dist/uPlot.iife.min.js "$vendor/uPlot.iife.min.js"
cp u/package/dist/uPlot.min.css "$vendor/uPlot.min.css"
cp u/package/LICENSE "$vendor/uPlot.LICENSE"
{
    echo "# Vendored by scripts/vendor-console-assets.sh from the npm registry; the tarballs'"
    echo "# integrity (as npm publishes it) was checked. Licences sit beside the files."
    echo "htmx.org $htmx $(npm view "htmx.org@$htmx" dist.integrity) 0BSD"
    echo "uplot $uplot $(npm view "uplot@$uplot" dist.integrity) MIT"
} > "$vendor/VERSIONS"
