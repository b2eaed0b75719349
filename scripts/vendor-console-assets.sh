#!/bin/sh
# Re-vendors the web console's scripts (control_plane/console/static/vendor) at the
# versions given, from the npm registry:
#   scripts/vendor-console-assets.sh HTMX_VERSION UPLOT_VERSION XTERM_VERSION XTERM_FIT_VERSION
# npm checks each tarball against the integrity the registry publishes; the
# versions and integrities are written to static/vendor/VERSIONS.
set -eu
htmx=$1 uplot=$2 xterm=$3 fit=$4
vendor=$(cd "$(dirname "$0")/.." && pwd)/control_plane/console/static/vendor
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$vendor"
cd "$work"
npm pack --silent "htmx.org@$htmx" "uplot@$uplot" "@xterm/xterm@$xterm" \
    "@xterm/addon-fit@$fit" >/dev/null
mkdir h u x f
tar xzf "htmx.org-$htmx.tgz" -C h
tar xzf "uplot-$uplot.tgz" -C u
tar xzf "xterm-xterm-$xterm.tgz" -C x
tar xzf "xterm-addon-fit-$fit.tgz" -C f
cp h/package/dist/htmx.min.js "$vendor/htmx.min.js"
cp h/package/LICENSE "$vendor/htmx.LICENSE"
cp u/package/dist/uPlot.iife.min.js "$vendor/uPlot.iife.min.js"
cp u/package/dist/uPlot.min.css "$vendor/uPlot.min.css"
cp u/package/LICENSE "$vendor/uPlot.LICENSE"
# The terminal (the shell page): the minified UMD build, without its source map line
# (the map is not shipped).
sed '/^\/\/# sourceMappingURL=/d' x/package/lib/xterm.js > "$vendor/xterm.js"
cp x/package/css/xterm.css "$vendor/xterm.css"
cp x/package/LICENSE "$vendor/xterm.LICENSE"
sed '/^\/\/# sourceMappingURL=/d' f/package/lib/addon-fit.js > "$vendor/addon-fit.js"
cp f/package/LICENSE "$vendor/addon-fit.LICENSE"
{
    echo "# Vendored by scripts/vendor-console-assets.sh from the npm registry; the tarballs'"
    echo "# integrity (as npm publishes it) was checked. Licences sit beside the files."
    echo "htmx.org $htmx $(npm view "htmx.org@$htmx" dist.integrity) 0BSD"
    echo "uplot $uplot $(npm view "uplot@$uplot" dist.integrity) MIT"
    echo "@xterm/xterm $xterm $(npm view "@xterm/xterm@$xterm" dist.integrity) MIT"
    echo "@xterm/addon-fit $fit $(npm view "@xterm/addon-fit@$fit" dist.integrity) MIT"
} > "$vendor/VERSIONS"
