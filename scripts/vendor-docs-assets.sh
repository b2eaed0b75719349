#!/bin/sh
# Re-vendors the Swagger UI and ReDoc files the docs pages serve
# (control_plane/docs_ui/static) at the versions given, from the npm registry:
#   scripts/vendor-docs-assets.sh SWAGGER_UI_DIST_VERSION REDOC_VERSION
# npm checks each tarball against the integrity the registry publishes; the
# versions and integrities are written to static/VERSIONS.
set -eu
swagger=$1 redoc=$2
static=$(cd "$(dirname "$0")/.." && pwd)/control_plane/docs_ui/static
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "swagger-ui-dist@$swagger" "redoc@$redoc" >/dev/null
mkdir s r
tar xzf "swagger-ui-dist-$swagger.tgz" -C s
tar xzf "redoc-$redoc.tgz" -C r
for f in swagger-ui-bundle.js swagger-ui-bundle.js.LICENSE.txt swagger-ui.css LICENSE NOTICE; do
    cp "s/package/$f" "$static/swagger-ui/$f"
done
for f in bundles/redoc.standalone.js bundles/redoc.standalone.js.LICENSE.txt LICENSE; do
    cp "r/package/$f" "$static/redoc/$(basename "$f")"
done
{
    echo "# Vendored by scripts/vendor-docs-assets.sh from the npm registry; the tarballs'"
    echo "# integrity (as npm publishes it) was checked. Licences sit beside the files."
    echo "swagger-ui-dist $swagger $(npm view "swagger-ui-dist@$swagger" dist.integrity) Apache-2.0"
    echo "redoc $redoc $(npm view "redoc@$redoc" dist.integrity) MIT"
} > "$static/VERSIONS"
