"""Servers: /servers."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.api.auth import current_key, key_checked_by_page
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.pagination import CursorArgs, cursor_page_schema
from control_plane.api.smorest import Blueprint
from control_plane.services import agents
from control_plane.services.servers import servers as svc

blp = Blueprint("servers", __name__, description="Servers")


class ServerSchema(Schema):
    id = ma.fields.UUID(required=True)
    name = ma.fields.String(required=True)
    provider = ma.fields.String(required=True)
    region = ma.fields.String(allow_none=True)
    cpu_cores = ma.fields.Integer(required=True)
    ram_mb = ma.fields.Integer(required=True)
    disk_gb = ma.fields.Integer(required=True)
    environment_count = ma.fields.Integer(required=True)
    # Beyond the spec: whether the server's agent holds its stream now, and when it
    # was last heard from (null: no agent has ever connected).
    connected = ma.fields.Function(
        lambda row: agents.connected(row["connected_since"], row["last_seen_at"]), required=True,
        metadata={"description": "The server's agent is connected now."})
    last_seen_at = UTCDateTime(allow_none=True, metadata={
        "description": "The agent's last heartbeat; null if no agent ever connected."})


ServerPage = cursor_page_schema(ServerSchema, "ServerPage")


@blp.route("/servers")
class Servers(MethodView):
    @key_checked_by_page
    @blp.arguments(CursorArgs, location="query")
    @blp.response(200, ServerPage)
    def get(self, args):
        """Servers available to the organization: its own and shared ones (oldest first)."""
        rows, meta = svc.list_servers(current_key(), **args)
        return {"data": rows, "pagination": meta}
