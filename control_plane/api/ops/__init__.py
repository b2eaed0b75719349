"""The deployment-operations surface at /api/v1 (user bearer tokens), and the Git
hosts' push webhooks at /api/v1/webhooks/<provider>."""

from control_plane.api.smorest import BerthApi, DeclaredResponses, SchemaRules

PREFIX = "/api/v1"

DESCRIPTION = """\
Deployment operations for members of an organization. Authenticate with a user
token (`berth admin user token USER_ID`) as `Authorization: Bearer <token>`.
Operations check the user's permissions (`project.environments.deploy`,
`project.deployments.cancel`) and membership of the resource's organization;
another organization's resources answer 404. Errors are `{"error": code, "message": text}`.
"""


def register(app):
    app.config.update({
        "OPS_API_TITLE": "Berth deployment operations",
        "OPS_API_VERSION": "v1",
        "OPS_OPENAPI_VERSION": "3.0.3",
        "OPS_OPENAPI_URL_PREFIX": PREFIX,
        "OPS_OPENAPI_JSON_PATH": "openapi.json",
    })
    api = BerthApi(app, config_prefix="OPS", spec_kwargs={
        "extra_plugins": [DeclaredResponses(), SchemaRules()],
        "info": {"description": DESCRIPTION},
        "servers": [{"url": app.config["PUBLIC_URL"].rstrip("/")}],
        "security": [{"bearerAuth": []}],
    })
    api.spec.components.security_scheme("bearerAuth", {"type": "http", "scheme": "bearer"})

    from control_plane.api.ops import (
        backup_policy,
        backups,
        configuration,
        copy_policy,
        deployments,
        domains,
        drills,
        git_webhooks,
        odoo_backups,
        wal_archive,
    )

    for module in (deployments, backups, backup_policy, copy_policy, drills, odoo_backups,
                   wal_archive, domains, configuration, git_webhooks):
        api.register_blueprint(module.blp, url_prefix=PREFIX)
    return api
