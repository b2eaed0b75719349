"""Live reads from a server's agent: server metrics, environment container
metrics, runtime logs. Each has the spec's per-target limits (across keys)."""

import datetime as dt
import re
import uuid

from limits import RateLimitItemPerMinute

from control_plane import agent_link, events
from control_plane.agent_link import HostKeyChanged, NotConnected
from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.inputs.safe_input import storable
from control_plane.models import CustomDomain, Environment, Server
from control_plane.services.environment_settings import access
from control_plane.services.servers import ssh as servers_ssh
from control_plane.vocabulary import errors, states
from control_plane.vocabulary.errors import NotFound
from protocol.errors import AgentErrorCode
from protocol.states import CertificateState, ServerHealth

PER_SERVER = RateLimitItemPerMinute(6)  # server metrics, per server
PER_ENVIRONMENT = RateLimitItemPerMinute(6)  # environment metrics, per environment
LOGS_PER_ENVIRONMENT = RateLimitItemPerMinute(6)  # runtime logs, per environment
PER_ORG_SERVER = RateLimitItemPerMinute(20)  # env metrics + logs, per org per server

METRICS_TIMEOUT = 10
LOGS_TIMEOUT = 25  # the agent gives the engine 20 s, then answers engine_timeout
NOT_READY = (states.EnvironmentStatus.PENDING, states.EnvironmentStatus.DEPLOYING)


def _now_ms():
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ask(berth, read, *args, unreachable, timed_out=None):
    """One live read through the agent link (`read`: one of agent_link's). `unreachable`
    is raised when the agent cannot be asked; `timed_out` (default: the same) when
    it is too slow."""
    try:
        return read(berth.gateway, *args)
    except HostKeyChanged:  # `args[0]`: the server; the same error, saying what to do
        raise type(unreachable)(servers_ssh.host_key_refusal(args[0])) from None
    except NotConnected:
        raise unreachable from None
    except TimeoutError:
        raise (timed_out or unreachable) from None


def server_status(m):
    """`m`: the host metrics as agent_link.host_metrics returns them."""
    cpu, memory, disk = m["cpu_percent"], m["memory_percent"], m["disk_percent"]
    if cpu >= 95 or memory >= 95 or disk >= 90:
        return ServerHealth.CRITICAL
    if cpu >= 80 or memory >= 80 or disk >= 80:
        return ServerHealth.WARNING
    return ServerHealth.HEALTHY


def own_server(actor, server_id):
    """Only the organization's own servers (a shared one is 404); a project-scoped
    key only while the server hosts one of its project's environments."""
    server = Server.get_or_none(Server.id == server_id, Server.deleted_at.is_null(),
                                Server.organization == actor.organization_id)
    if server is None or (actor.project_scoped and not Environment.select().where(
            Environment.server == server.id, Environment.project == actor.project_id,
            Environment.is_active).exists()):
        raise NotFound("Server not found.")
    return server


def server_metrics(actor, server_id, berth):
    server = own_server(actor, server_id)
    berth.limiter.hit_target(PER_SERVER, "metrics:server", server.id.hex)
    reply = ask(berth, agent_link.host_metrics, server.id, METRICS_TIMEOUT,
                 unreachable=errors.MetricsUnavailable())
    if reply.error_code or reply.data is None:
        raise errors.MetricsUnavailable()
    return {"server_id": server.id, "status": server_status(reply.data), **reply.data,
            "queried_at": _now_ms()}


def ready(actor, environment_id, berth, limit, namespace, running=True, env=None):
    """The environment a live read asks about, counted against `limit`: on a server,
    and (with `running`) past its first deploy."""
    env = env or access.environment(actor, environment_id)
    if env.server_id is None:
        raise errors.NoServer("The environment has no server yet.")
    if running and env.status in NOT_READY:
        raise errors.EnvironmentNotReady(
            f"The environment is {env.status}; try again when it is running.")
    berth.limiter.hit_target(limit, namespace, env.id.hex)
    berth.limiter.hit_target(PER_ORG_SERVER, "live:org-server", actor.organization_id.hex,
                             env.server_id.hex)
    return env


def environment_metrics(actor, environment_id, berth):
    env = ready(actor, environment_id, berth, PER_ENVIRONMENT, "metrics:environment")
    reply = ask(berth, agent_link.container_metrics, env.server_id, env.id, METRICS_TIMEOUT,
                 unreachable=errors.MetricsUnavailable())
    if reply.error_code:
        raise errors.MetricsUnavailable()
    return {
        "environment_id": env.id, "status": states.public_environment_status(env.status),
        "erp": reply.data["erp"], "postgres": reply.data["postgres"],
        "disk": {"allocated_gb": env.disk_gb or 0, "database_bytes": env.disk_database_bytes,
                 "filestore_bytes": env.disk_filestore_bytes,
                 "addons_bytes": env.disk_addons_bytes, "measured_at": env.disk_measured_at},
        "queried_at": _now_ms(),
    }


def record_disk_usage(server_id, report):
    """Store an agent's disk report (agent_link.disk_usage): the latest figures of
    each of its environments. Only environments placed on that server are written
    (an agent speaks for its own server only); a figure the agent left unset (or
    sent negative) keeps the stored one; a report older than the stored one (a
    re-send) changes nothing."""
    now = clock.now()
    with database.atomic():  # one commit for the server's environments
        for item in report:
            try:
                env_id = uuid.UUID(item["environment_id"])
            except ValueError:
                continue
            values = {getattr(Environment, f"disk_{name}"): item[name]
                      for name in agent_link.DISK_FIGURES if item.get(name, -1) >= 0}
            values[Environment.disk_measured_at] = at = _agent_time(item["measured_at_unix_ms"],
                                                                    now)
            if "made_of" in item:  # agents before those fields keep what was stored
                values[Environment.disk_made_of] = item["made_of"]
            Environment.update(values).where(
                Environment.id == env_id, Environment.server == server_id, Environment.is_active,
                Environment.disk_measured_at.is_null() | (Environment.disk_measured_at <= at),
            ).execute()


MAX_NAMES = 1000
CERTIFICATE_STATES = tuple(CertificateState)
FAILING = CertificateState.FAILING


def record_proxy(server_id, state):
    """Store an agent's proxy report (its health, each routed name's certificate;
    protocol.wire.proxy_state), keeping only the fields and sizes it documents:
    it is the agent's word, shown to readers of the environments' status."""
    try:
        names = state.get("certificates") or {}
        report = {"running": state.get("running") is True,
                  "reason": _text(state.get("reason")),
                  "certificates": {
                      _text(name, 253): {"state": c.get("state"),
                                         "valid_until": _text(c.get("valid_until"), 32),
                                         "reason": _text(c.get("reason"))}
                      for name, c in list(names.items())[:MAX_NAMES]
                      if isinstance(c, dict) and c.get("state") in CERTIFICATE_STATES},
                  "reported_at": clock.now().isoformat() + "Z"}
    except (AttributeError, TypeError):
        return  # not what an agent sends: ignored
    with database.atomic():
        server = Server.get_or_none(Server.id == server_id)
        if server is None:
            return
        before = (server.proxy_state or {}).get("certificates") or {}
        Server.update(proxy_state=report).where(Server.id == server_id).execute()
        for name, cert in report["certificates"].items():
            if cert["state"] == FAILING and (before.get(name) or {}).get("state") != FAILING \
                    and server.organization_id is not None:
                events.record_certificate_failing(server, _answering(server_id, name), name,
                                                  cert["reason"])


def _answering(server_id, hostname):
    """The environment on the server that answers at `hostname`, if one does: its
    verified custom domain, or its own name (the first 12 hex of its id)."""
    domain = (CustomDomain.select(CustomDomain.environment).join(Environment)
              .where(CustomDomain.name == hostname, Environment.server == server_id).first())
    if domain is not None:
        return Environment.get_by_id(domain.environment_id)
    label = hostname.split(".", 1)[0]
    return next((e for e in Environment.select().where(Environment.server == server_id,
                                                        Environment.is_active)
                 if e.id.hex[:12] == label), None)


def _text(value, limit=500):
    return storable(value[:limit]) if isinstance(value, str) else None


def _agent_time(unix_ms, now):
    """The agent's clock, never ahead of ours (and ours when it makes no sense)."""
    try:
        at = dt.datetime.fromtimestamp(unix_ms / 1000, dt.UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return now
    return min(now, at) if unix_ms > 0 else now


def runtime_logs(actor, environment_id, source, lines, berth):
    env = ready(actor, environment_id, berth, LOGS_PER_ENVIRONMENT, "logs:environment")
    unreachable = errors.ServerUnreachable(
        "The server or its container engine could not be reached.")
    timed_out = errors.EngineTimeout("The container engine did not answer within 20 seconds.")
    reply = ask(berth, agent_link.runtime_logs, env.server_id, env.id,
                 "erp" if source == "container" else source, lines, LOGS_TIMEOUT,
                 unreachable=unreachable, timed_out=timed_out)
    if reply.error_code == AgentErrorCode.CONTAINER_NOT_FOUND:
        raise errors.ContainerNotFound(
            "The container does not exist on the server. Deploy to create it.")
    if reply.error_code == AgentErrorCode.ENGINE_TIMEOUT:
        raise timed_out
    if reply.error_code:
        raise unreachable
    logs = reply.data
    return {"environment_id": env.id, "source": source, "lines": logs["lines"],
            "truncated": logs["truncated"], "log": logs["log"], "fetched_at": _now_ms()}


# What the ERP (Odoo's "date time pid LEVEL db logger: message") and PostgreSQL
# ("... LOG:  message") print, as a level to filter on.
LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|PANIC|LOG|NOTICE)\b:?")
LEVELS = {"DEBUG": "debug", "INFO": "info", "LOG": "info", "NOTICE": "info",
          "WARNING": "warning", "WARN": "warning", "ERROR": "error", "CRITICAL": "error",
          "FATAL": "error", "PANIC": "error"}


def leveled(log):
    """[(level, line)] of a runtime log's text: debug, info, warning or error, read
    from the line's head (info when it names none)."""
    def level(line):
        found = LEVEL.search(line[:80])
        return LEVELS[found.group(1)] if found else "info"
    return [(level(line), line) for line in log.split("\n")] if log else []
