"""An environment's WAL archiving on the deployment-operations surface: whether
its PostgreSQL's write-ahead log reaches backup storage, and how far behind."""

from flask.views import MethodView

from control_plane.api.ops.auth import current_actor, init_blueprint
from control_plane.api.public.wal_archive import WalArchiveSchema
from control_plane.api.smorest import Blueprint, error_responses
from control_plane.services.backups import wal as svc

blp = init_blueprint(Blueprint("ops_wal_archive", __name__,
                               description="Continuous archiving of the database's WAL"))

ERRORS = {
    401: "Missing, invalid, revoked or expired user token",
    404: "Environment not found or in another organization (`not_found`)",
}
errors = error_responses(blp, ERRORS)


@blp.route("/environments/<uuid:env_id>/wal-archive")
class WalArchive(MethodView):
    @errors()
    @blp.response(200, WalArchiveSchema)
    def get(self, env_id):
        """Read an environment's WAL archiving

        Any member of the organization."""
        return svc.get(current_actor(), env_id)
