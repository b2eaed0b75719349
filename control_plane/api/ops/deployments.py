"""Deployment operations: retry, cancel, rollback, deploy, destroy, manual
deployments, the deployment list, and per-environment settings."""

from flask_smorest import Blueprint

from control_plane.api.ops.auth import init_blueprint

blp = init_blueprint(Blueprint("operations", __name__, description="Deployment operations"))
