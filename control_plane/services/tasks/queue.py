"""The durable agent-command queue: commands stored in the same transaction as
the change that needs them, delivered when the agent (re)connects, acknowledged,
and executed at most once (the agent remembers what it has run).

It imports nothing above it: what an acknowledgement or a result means for a
task is decided in `engine` (record_ack, record_result), which calls this."""

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import AgentCommand, TaskLogLine
from control_plane.vocabulary import states

C = states.CommandStatus
# The moves are states.COMMAND's; each WHERE clause below starts from its sources.
UNDELIVERED = states.COMMAND_UNDELIVERED


def enqueue(server_id, kind, payload=None, deployment_id=None):
    """Call inside the caller's transaction; the gateway picks it up on its next
    wake-up (signalled after commit) or poll."""
    return AgentCommand.create(server=server_id, kind=kind, payload=payload or {},
                               deployment=deployment_id)


def undelivered(server_id, exclude=(), resync=False):
    """Commands the agent has not acknowledged yet, oldest first. With `resync`
    (a new stream), also those it acknowledged but whose result never arrived
    (lost with a dropped stream or a killed process): the agent answers those
    from its journal, never by running them again."""
    statuses = (*UNDELIVERED, C.ACKED) if resync else UNDELIVERED
    query = (AgentCommand.select()
             .where(AgentCommand.server == server_id, AgentCommand.status.in_(statuses))
             .order_by(AgentCommand.created_at, AgentCommand.id))
    return [c for c in query if c.id.hex not in exclude]


def servers_with_pending():
    """Ids (str) of the servers that have commands not yet acknowledged."""
    rows = (AgentCommand.select(AgentCommand.server).distinct()
            .where(AgentCommand.status.in_(UNDELIVERED)).tuples())
    return {str(server_id) for (server_id,) in rows}


def mark_delivered(command_id):
    (AgentCommand.update(status=C.DELIVERED, delivered_at=clock.now(),
                         attempts=AgentCommand.attempts + 1)
     .where(AgentCommand.id == command_id,
            AgentCommand.status.in_(states.sources("command", C.DELIVERED))).execute())


def deployment_of(server_id, command_id):
    return (AgentCommand.select(AgentCommand.deployment)
            .where(AgentCommand.id == command_id, AgentCommand.server == server_id).scalar())


def mark_acked(server_id, command_id):
    """The command's task (deployment id), or None when this changed nothing or
    the command has no task; the caller settles what the acknowledgement means."""
    acked = (AgentCommand.update(status=C.ACKED, acked_at=clock.now())
             .where(AgentCommand.id == command_id, AgentCommand.server == server_id,
                    AgentCommand.status.in_(states.sources("command", C.ACKED))).execute())
    return deployment_of(server_id, command_id) if acked else None


def withdraw(deployment_id, reason):
    """The deployment ended without its agent (cancelled, timed out): its commands
    not yet delivered are never sent, and ones the agent holds are no longer asked
    for. A result the agent sends later is still recorded on the command, and
    settles nothing (the deployment is terminal)."""
    return (AgentCommand.update(status=C.WITHDRAWN, completed_at=clock.now(),
                                result={"result": None, "error": reason})
            .where(AgentCommand.deployment == deployment_id,
                   AgentCommand.status.in_(states.sources("command", C.WITHDRAWN))).execute())


def mark_completed(server_id, command_id, ok, result=None, error=None):
    """Store the agent's result on the command; returns its task (deployment id),
    or None when this changed nothing (a result sent twice) or there is no task."""
    status = C.SUCCEEDED if ok else C.FAILED
    recorded = (AgentCommand.update(status=status, completed_at=clock.now(),
                                    result={"result": result, "error": error or None})
                .where(AgentCommand.id == command_id, AgentCommand.server == server_id,
                       AgentCommand.status.in_(states.sources("command", status))).execute())
    return deployment_of(server_id, command_id) if recorded else None


LEVELS = ("info", "warning", "error")


def append_logs(server_id, lines):
    """Progress lines of a server's commands: [(command_id, seq, level, message)].
    Stored on the command's deployment (its task log); a line sent again after a
    reconnect (same seq) is kept once."""
    by_command = {}
    for command_id, seq, level, message in lines:
        by_command.setdefault(command_id, []).append((seq, level, message))
    with database.atomic():
        for command_id, rows in by_command.items():
            deployment = (AgentCommand.select(AgentCommand.deployment)
                          .where(AgentCommand.id == command_id, AgentCommand.server == server_id,
                                 AgentCommand.deployment.is_null(False)).scalar())
            if deployment is None:
                continue  # commands without a deployment have no task log
            (TaskLogLine.insert_many(
                [{"deployment": deployment, "seq": seq, "message": message[:10_000],
                  "level": level if level in LEVELS else "info"} for seq, level, message in rows])
             .on_conflict_ignore().execute())
