"""The public API at /api/public/v1 (API keys)."""

from control_plane import docs_ui
from control_plane.api.smorest import BerthApi, SchemaRules, StandardResponses

PREFIX = "/api/public/v1"

DESCRIPTION = """\
Authenticate with an API key: `Authorization: Bearer <key>` (recommended) or
`X-API-Key: <key>`; when both are sent, `Authorization` wins. Read-only keys
(`svc_live_ro_…`) may only GET and allow 120 requests per 60 s; full-access keys
(`svc_live_rw_…`) allow 20. Every authenticated response carries `X-API-Key-Id`,
`X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Window`.
Errors are `{"error": code, "message": text}`.
"""


def register(app):
    app.config.update({
        "PUBLIC_API_TITLE": "Berth public API",
        "PUBLIC_API_VERSION": "v1",
        "PUBLIC_OPENAPI_VERSION": "3.0.3",
        "PUBLIC_OPENAPI_URL_PREFIX": PREFIX,
        "PUBLIC_OPENAPI_JSON_PATH": "openapi.json",
        "PUBLIC_OPENAPI_SWAGGER_UI_PATH": "/docs",
        # Served from this package (control_plane/docs_ui), never from a CDN.
        "PUBLIC_OPENAPI_SWAGGER_UI_URL": docs_ui.asset_url("swagger-ui/"),
        # No validator badge: it would send the document's URL to a public service.
        "PUBLIC_OPENAPI_SWAGGER_UI_CONFIG": {"validatorUrl": None},
        "PUBLIC_OPENAPI_REDOC_PATH": "/redoc",
        "PUBLIC_OPENAPI_REDOC_URL": docs_ui.asset_url("redoc/redoc.standalone.js"),
    })
    if "docs_ui" not in app.blueprints:
        app.register_blueprint(docs_ui.blp)
    api = BerthApi(app, config_prefix="PUBLIC", spec_kwargs={
        "extra_plugins": [StandardResponses(), SchemaRules()],
        "info": {"description": DESCRIPTION},
        "servers": [{"url": app.config["PUBLIC_URL"].rstrip("/")}],  # paths carry the prefix
        "security": [{"bearerAuth": []}, {"apiKeyHeader": []}],
    })
    api.spec.components.security_scheme("bearerAuth", {"type": "http", "scheme": "bearer"})
    api.spec.components.security_scheme(
        "apiKeyHeader", {"type": "apiKey", "in": "header", "name": "X-API-Key"})

    from control_plane.api import auth
    from control_plane.api.public import (
        audit,
        automation,
        backups,
        builds,
        changelog,
        channels,
        drills,
        environments,
        forge,
        mails,
        metric_history,
        monitoring,
        projects,
        registration_tokens,
        servers,
        shells,
        sizes,
        tickets,
        wal_archive,
        webhooks,
    )

    auth.init_app(app, PREFIX, open_paths=("openapi.json", "docs", "redoc"))
    for module in (projects, environments, backups, drills, wal_archive, servers,
                   registration_tokens, monitoring, mails, shells, metric_history, sizes, tickets,
                   changelog, webhooks, channels, automation, builds, forge, audit):
        api.register_blueprint(module.blp, url_prefix=PREFIX)
    return api
