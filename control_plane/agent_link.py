"""The services' way to the agents, below them: `AgentLink` is what `Berth.gateway`
holds, the in-process gateway (gateway/server.py) or the Redis relay
(gateway/relay.py). Live reads go through the functions here, which build the
protocol request and turn the reply into plain data: services never handle
protobuf messages nor import the gateway."""

import json
import operator
from dataclasses import dataclass, field
from typing import Protocol

from protocol.v1 import agent_pb2 as pb


class NotConnected(Exception):
    """No gateway holds a live stream to the server."""


class HostKeyChanged(NotConnected):
    """A server reached over SSH offered a host key other than the pinned one: no
    contact until an operator accepts it (gateway/ssh/sessions.py)."""


class ShellUnsupported(Exception):
    """The server's agent is of a release without shell sessions."""


class ShellPipe(Protocol):
    def send(self, frame: pb.ShellFrame) -> None:
        """Input, a new size, the input's end or a hang-up (`close`), to the agent
        (thread-safe, never blocks). After `close` nothing more is delivered."""


class AgentLink(Protocol):
    def call(self, server_id, request: pb.LiveRequest, timeout: float) -> pb.LiveReply:
        """Send a live request and wait for its reply (blocking, thread-safe).
        Raises NotConnected, or TimeoutError after `timeout` seconds."""

    def shell(self, server_id, opening: pb.ShellOpen, on_frame) -> ShellPipe:
        """Open a shell session (protocol: ShellOpen). `on_frame(ShellFrame)` is
        called, from the link's own thread, with each frame the agent sends: `opened`,
        output, then `exited` or an `error_code` (also when the way to the agent is
        lost), after which the session is gone. Raises NotConnected or
        ShellUnsupported at once."""

    def wake(self, server_id) -> None:
        """Durable commands are queued for the server: deliver them now if it is
        connected (else the gateway's poll or the next connection does)."""


def current_berth():
    """The running app's `Berth` (app.py), the Context of views and admin commands:
    those run inside a Flask app context (a request's, a CLI command's)."""
    from flask import current_app

    return current_app.extensions["berth"]


class Context(Protocol):
    """What a service is given besides its arguments, one way, as `berth`: the
    settings, the way to the agents and the shared rate limiter. The app's `Berth`
    (app.py) is one; a script or test without an app makes a `Plain` one. Only
    helpers that compute from configuration alone take `settings`."""

    settings: dict
    gateway: AgentLink
    limiter: object


class Unlinked:
    """No way to agents from this process: commands wait in their queue for a
    gateway's poll, live requests fail as not connected."""

    def call(self, server_id, request, timeout):
        raise NotConnected(str(server_id))

    def shell(self, server_id, opening, on_frame):
        raise NotConnected(str(server_id))

    def wake(self, server_id):
        pass


@dataclass
class Plain:
    """A Context without an app (scripts, benchmarks, tests)."""

    settings: dict
    gateway: AgentLink = field(default_factory=Unlinked)
    limiter: object = None


@dataclass(frozen=True)
class Reply:
    """A live reply: `error_code` is empty when the agent answered; `data` holds
    the answer's fields (None when the reply carries no body of the kind asked)."""

    error_code: str
    data: dict | None


HOST_METRICS = tuple(f.name for f in pb.HostMetrics.DESCRIPTOR.fields)
CONTAINER_FIGURES = ("cpu_percent", "memory_used_bytes", "memory_limit_bytes", "memory_percent")
DISK_FIGURES = ("database_bytes", "filestore_bytes", "addons_bytes")
# What the disk measurement counts (in `made_of`), kept as history beside the sizes.
DISK_COUNTS = ("filestore_files", "attachments_missing", "files_orphaned")


def host_metrics(link: AgentLink, server_id, timeout) -> Reply:
    reply = link.call(server_id, pb.LiveRequest(host_metrics=pb.HostMetricsRequest()), timeout)
    if not reply.HasField("host_metrics"):
        return Reply(reply.error_code, None)
    return Reply(reply.error_code, host_metrics_data(reply.host_metrics))


def host_metrics_data(m: pb.HostMetrics) -> dict:
    return {name: getattr(m, name) for name in HOST_METRICS}


def container_metrics(link: AgentLink, server_id, environment_id, timeout) -> Reply:
    """`erp` and `postgres`: each container's figures, None when it does not exist."""
    reply = link.call(server_id, pb.LiveRequest(container_metrics=pb.ContainerMetricsRequest(
        environment_id=str(environment_id))), timeout)
    found = reply.container_metrics
    return Reply(reply.error_code, {role: _stats(found, role) for role in ("erp", "postgres")})


def _stats(found, role):
    if not found.HasField(role):
        return None
    s = getattr(found, role)
    return {"status": s.status, **{name: getattr(s, name) if s.HasField(name) else None
                                   for name in CONTAINER_FIGURES}}


def runtime_logs(link: AgentLink, server_id, environment_id, source, lines, timeout) -> Reply:
    """`log`, `lines` and `truncated` of a container's output (`source`: erp | postgres)."""
    reply = link.call(server_id, pb.LiveRequest(runtime_logs=pb.RuntimeLogsRequest(
        environment_id=str(environment_id), source=source, lines=lines)), timeout)
    logs = reply.runtime_logs
    return Reply(reply.error_code,
                 {"log": logs.log, "lines": logs.lines, "truncated": logs.truncated})


def mails(link: AgentLink, server_id, environment_id, limit, mail_id, timeout) -> Reply:
    """The mail catcher's: {"mails": [summary...]}, or with `mail_id` {"mail": mail|None}."""
    reply = link.call(server_id, pb.LiveRequest(mails=pb.MailsRequest(
        environment_id=str(environment_id), limit=limit, mail_id=mail_id or "")), timeout)
    found = reply.mails.mails_json
    return Reply(reply.error_code, json.loads(found) if found else {})


def disk_usage(report: pb.DiskReport) -> list[dict]:
    """An agent's DiskReport: per environment its id, `measured_at_unix_ms` and the
    figures it took (one it could not take this time is left out), and `made_of`
    when the agent said what the size is made of (agents before those fields never
    do)."""
    return [{"environment_id": item.environment_id,
             "measured_at_unix_ms": item.measured_at_unix_ms,
             **{name: getattr(item, name) for name in DISK_FIGURES if item.HasField(name)},
             **_made_of(item)}
            for item in report.environments]


def _made_of(item: pb.EnvironmentDisk) -> dict:
    if not item.largest_tables and not item.HasField("attachments_missing"):
        return {}
    made_of = {"largest_tables": [{"name": t.name, "bytes": t.bytes, "rows": t.rows}
                                  for t in item.largest_tables]}
    if item.HasField("attachments_missing"):
        made_of.update(filestore_files=item.filestore_files,
                       attachments_missing=item.attachments_missing,
                       files_orphaned=item.files_orphaned,
                       missing_sample=list(item.missing_sample))
    return {"made_of": made_of}


ENVIRONMENT_FIGURES = operator.attrgetter(
    "erp_cpu_percent", "erp_memory_used_bytes", "postgres_cpu_percent",
    "postgres_memory_used_bytes")


def environment_samples(beat: pb.Heartbeat):
    """(environment id, (erp CPU, erp memory, postgres CPU, postgres memory)) for each
    environment a heartbeat carries (none from an agent older than the field); a
    figure the agent did not take is -1, which the history stores as not taken."""
    return [(item.environment_id, ENVIRONMENT_FIGURES(item)) for item in beat.environments]


def crash_loops(beat: pb.Heartbeat) -> list[dict]:
    """The containers a heartbeat says are restarting in a loop."""
    return [{"environment_id": x.environment_id, "role": x.role,
             "restart_count": x.restart_count, "state": x.state} for x in beat.crash_loops]
