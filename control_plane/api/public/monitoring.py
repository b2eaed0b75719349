"""Live reads: /servers/{id}/metrics, /environments/{id}/metrics,
/environments/{id}/runtime-logs (read-only keys welcome)."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.smorest import Blueprint, ErrorSchema
from control_plane.services.servers import monitoring as svc
from protocol.states import ServerHealth

blp = Blueprint("monitoring", __name__, description="Metrics and runtime logs")

# Live reads go through the server's agent: what it answers when the agent cannot.
HOST_KEY_CHANGED = ("; for a server reached over SSH whose host key changed, the message "
                    "says so, with the new key's fingerprint and how to accept it (retrying "
                    "cannot help)")
METRICS_UNAVAILABLE = ("`metrics_unavailable`: the server or its monitoring agent did not "
                       "return metrics (not connected, or an error). Retry in a minute"
                       f"{HOST_KEY_CHANGED}.")
NOT_READY = ("`no_server` (the environment has no server yet), `environment_not_ready` "
             "(pending or deploying)")


def live_errors(*responses):
    def decorate(view):
        for status, description in responses:
            view = blp.alt_response(status, schema=ErrorSchema, description=description)(view)
        return view
    return decorate



class ServerMetricsSchema(Schema):
    server_id = ma.fields.UUID(required=True)
    status = ma.fields.String(required=True, metadata={
        "enum": [h.value for h in ServerHealth]})
    cpu_percent = ma.fields.Float(required=True)
    memory_percent = ma.fields.Float(required=True)
    disk_percent = ma.fields.Float(required=True)
    memory_used_bytes = ma.fields.Integer(required=True)
    memory_total_bytes = ma.fields.Integer(required=True)
    disk_used_bytes = ma.fields.Integer(required=True)
    disk_total_bytes = ma.fields.Integer(required=True)
    network_rx_bytes_per_second = ma.fields.Float(required=True)
    network_tx_bytes_per_second = ma.fields.Float(required=True)
    container_count = ma.fields.Integer(required=True)
    containers_running = ma.fields.Integer(required=True)
    queried_at = ma.fields.String(required=True)


class ContainerSchema(Schema):
    status = ma.fields.String(required=True)
    cpu_percent = ma.fields.Float(allow_none=True, required=True)
    memory_used_bytes = ma.fields.Integer(allow_none=True, required=True)
    memory_limit_bytes = ma.fields.Integer(allow_none=True, required=True)
    memory_percent = ma.fields.Float(allow_none=True, required=True)


class DiskSchema(Schema):
    allocated_gb = ma.fields.Integer(required=True)
    database_bytes = ma.fields.Integer(allow_none=True, required=True)
    filestore_bytes = ma.fields.Integer(allow_none=True, required=True)
    addons_bytes = ma.fields.Integer(allow_none=True, required=True)
    measured_at = UTCDateTime(allow_none=True, required=True)


class EnvironmentMetricsSchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    status = ma.fields.String(required=True)
    erp = ma.fields.Nested(ContainerSchema, allow_none=True, required=True)
    postgres = ma.fields.Nested(ContainerSchema, allow_none=True, required=True)
    disk = ma.fields.Nested(DiskSchema, required=True)
    queried_at = ma.fields.String(required=True)


class RuntimeLogArgs(ma.Schema):
    source = ma.fields.String(load_default="erp",
                              validate=ma.validate.OneOf(["erp", "container", "postgres"]))
    lines = ma.fields.Integer(load_default=200, validate=ma.validate.Range(1, 1000))


class RuntimeLogSchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    source = ma.fields.String(required=True)
    lines = ma.fields.Integer(required=True)
    truncated = ma.fields.Boolean(required=True)
    log = ma.fields.String(required=True)
    fetched_at = ma.fields.String(required=True)


@blp.route("/servers/<uuid:server_id>/metrics")
class ServerMetrics(MethodView):
    @live_errors((502, METRICS_UNAVAILABLE))
    @blp.response(200, ServerMetricsSchema)
    def get(self, server_id):
        """Live host metrics of a server the organization owns (6 per minute per server)."""
        return svc.server_metrics(current_actor(), server_id, current_berth())


@blp.route("/environments/<uuid:env_id>/metrics")
class EnvironmentMetrics(MethodView):
    @live_errors((409, NOT_READY), (502, METRICS_UNAVAILABLE))
    @blp.response(200, EnvironmentMetricsSchema)
    def get(self, env_id):
        """Live metrics of the environment's own containers."""
        return svc.environment_metrics(current_actor(), env_id, current_berth())


@blp.route("/environments/<uuid:env_id>/runtime-logs")
class RuntimeLogs(MethodView):
    @live_errors((409, NOT_READY + ", `container_not_found` (deploy to create it)"),
                 (502, "`server_unreachable`: the server or its container engine could not "
                       f"be reached{HOST_KEY_CHANGED}"),
                 (504, "`engine_timeout`: the container engine did not answer within 20 "
                       "seconds"))
    @blp.arguments(RuntimeLogArgs, location="query")
    @blp.response(200, RuntimeLogSchema)
    def get(self, args, env_id):
        """The last lines a container printed, read live from the server."""
        return svc.runtime_logs(current_actor(), env_id, args["source"], args["lines"], current_berth())
