"""Live reads from a server's agent: server metrics, environment container
metrics, runtime logs. Each has the spec's per-target limits (across keys)."""

import datetime as dt
import uuid

from limits import RateLimitItemPerMinute

from agent.rpc.v1 import agent_pb2 as pb
from control_plane import clock
from control_plane.db import database
from control_plane.errors import ApiError, Conflict, NotFound
from control_plane.models import Environment, Server
from control_plane.services import environments

PER_SERVER = RateLimitItemPerMinute(6)  # server metrics, per server
PER_ENVIRONMENT = RateLimitItemPerMinute(6)  # environment metrics, per environment
LOGS_PER_ENVIRONMENT = RateLimitItemPerMinute(6)  # runtime logs, per environment
PER_ORG_SERVER = RateLimitItemPerMinute(20)  # env metrics + logs, per org per server

METRICS_TIMEOUT = 10
LOGS_TIMEOUT = 25  # the agent gives the engine 20 s, then answers engine_timeout
NOT_READY = ("pending", "cloning", "deploying")


class Unavailable(ApiError):
    status, code = 502, "metrics_unavailable"
    message = "The server or its agent did not return metrics. Retry in a minute."


def _now_ms():
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ask(berth, server_id, request, timeout, unreachable, timed_out=None):
    """One live request through the gateway. `unreachable` is raised when the
    agent cannot be asked; `timed_out` (default: the same) when it is too slow."""
    from control_plane.gateway.server import NotConnected

    if berth.gateway is None:
        raise unreachable
    try:
        return berth.gateway.call(server_id, request, timeout)
    except NotConnected:
        raise unreachable from None
    except TimeoutError:
        raise (timed_out or unreachable) from None


def server_status(m):
    if m.cpu_percent >= 95 or m.memory_percent >= 95 or m.disk_percent >= 90:
        return "critical"
    if m.cpu_percent >= 80 or m.memory_percent >= 80 or m.disk_percent >= 80:
        return "warning"
    return "healthy"


def server_metrics(key, server_id, berth):
    """Only the organization's own servers (a shared one is 404); a project-scoped
    key only while the server hosts one of its project's environments."""
    server = Server.get_or_none(Server.id == server_id, Server.deleted_at.is_null(),
                                Server.organization == key.organization_id)
    if server is None or (key.project_scoped and not Environment.select().where(
            Environment.server == server.id, Environment.project == key.project_id,
            Environment.is_active).exists()):
        raise NotFound("Server not found.")
    berth.limiter.hit_target(PER_SERVER, "metrics:server", server.id.hex)
    reply = _ask(berth, server.id, pb.LiveRequest(host_metrics=pb.HostMetricsRequest()),
                 METRICS_TIMEOUT, Unavailable())
    if reply.error_code or not reply.HasField("host_metrics"):
        raise Unavailable()
    m = reply.host_metrics
    return {"server_id": server.id, "status": server_status(m), **{
        f.name: getattr(m, f.name) for f in pb.HostMetrics.DESCRIPTOR.fields},
        "queried_at": _now_ms()}


def _ready(key, environment_id, berth, limit, namespace):
    env = environments.get_environment(key, environment_id)
    if env.server_id is None:
        raise Conflict("The environment has no server yet.", code="no_server")
    if env.status in NOT_READY:
        raise Conflict(f"The environment is {env.status}; try again when it is running.",
                       code="environment_not_ready")
    berth.limiter.hit_target(limit, namespace, env.id.hex)
    berth.limiter.hit_target(PER_ORG_SERVER, "live:org-server", key.organization_id.hex,
                             env.server_id.hex)
    return env


def environment_metrics(key, environment_id, berth):
    env = _ready(key, environment_id, berth, PER_ENVIRONMENT, "metrics:environment")
    reply = _ask(berth, env.server_id, pb.LiveRequest(container_metrics=pb.ContainerMetricsRequest(
        environment_id=str(env.id))), METRICS_TIMEOUT, Unavailable())
    if reply.error_code:
        raise Unavailable()
    found = reply.container_metrics
    return {
        "environment_id": env.id, "status": env.status,
        "erp": _stats(found, "erp"), "postgres": _stats(found, "postgres"),
        "disk": {"allocated_gb": env.disk_gb or 0, "database_bytes": env.disk_database_bytes,
                 "filestore_bytes": env.disk_filestore_bytes,
                 "addons_bytes": env.disk_addons_bytes, "measured_at": env.disk_measured_at},
        "queried_at": _now_ms(),
    }


DISK_FIGURES = ("database_bytes", "filestore_bytes", "addons_bytes")


def record_disk_usage(server_id, report):
    """Store an agent's DiskReport: the latest figures of each of its environments.
    Only environments placed on that server are written (an agent speaks for its
    own server only); a figure the agent left unset (or sent negative) keeps the
    stored one; a report older than the stored one (a re-send) changes nothing."""
    now = clock.now()
    with database.atomic():  # one commit for the server's environments
        for item in report.environments:
            try:
                env_id = uuid.UUID(item.environment_id)
            except ValueError:
                continue
            values = {getattr(Environment, f"disk_{name}"): getattr(item, name)
                      for name in DISK_FIGURES if item.HasField(name) and getattr(item, name) >= 0}
            values[Environment.disk_measured_at] = at = _agent_time(item.measured_at_unix_ms, now)
            Environment.update(values).where(
                Environment.id == env_id, Environment.server == server_id, Environment.is_active,
                Environment.disk_measured_at.is_null() | (Environment.disk_measured_at <= at),
            ).execute()


def _agent_time(unix_ms, now):
    """The agent's clock, never ahead of ours (and ours when it makes no sense)."""
    try:
        at = dt.datetime.fromtimestamp(unix_ms / 1000, dt.UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return now
    return min(now, at) if unix_ms > 0 else now


def _stats(found, role):
    if not found.HasField(role):
        return None
    s = getattr(found, role)
    return {"status": s.status, **{
        name: getattr(s, name) if s.HasField(name) else None
        for name in ("cpu_percent", "memory_used_bytes", "memory_limit_bytes", "memory_percent")}}


def runtime_logs(key, environment_id, source, lines, berth):
    env = _ready(key, environment_id, berth, LOGS_PER_ENVIRONMENT, "logs:environment")
    unreachable = ApiError("The server or its container engine could not be reached.",
                           status=502, code="server_unreachable")
    timed_out = ApiError("The container engine did not answer within 20 seconds.",
                         status=504, code="engine_timeout")
    reply = _ask(berth, env.server_id, pb.LiveRequest(runtime_logs=pb.RuntimeLogsRequest(
        environment_id=str(env.id), source="erp" if source == "container" else source,
        lines=lines)), LOGS_TIMEOUT, unreachable, timed_out)
    if reply.error_code == "container_not_found":
        raise Conflict("The container does not exist on the server. Deploy to create it.",
                       code="container_not_found")
    if reply.error_code == "engine_timeout":
        raise timed_out
    if reply.error_code:
        raise unreachable
    logs = reply.runtime_logs
    return {"environment_id": env.id, "source": source, "lines": logs.lines,
            "truncated": logs.truncated, "log": logs.log, "fetched_at": _now_ms()}
