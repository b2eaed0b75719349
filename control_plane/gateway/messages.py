"""What crosses an agent's stream, seen from the gateway: one handler per kind of
message the agent sends (`HANDLERS`, the `AgentMessage.body` names), and the
durable commands sent to it, in the agent's protocol revision (`due_commands`).

Handlers run on the gateway's event loop; database work goes to a worker thread.
A kind with no handler (from an agent newer than this gateway) is ignored."""

import itertools
import operator
import uuid

from control_plane import agent_link
from control_plane.gateway import reports, shells
from control_plane.models.metrics import SERVER_SERIES
from control_plane.services.environment_settings import configuration
from control_plane.services.servers import history
from control_plane.services.tasks import queue
from protocol import wire
from protocol.v1 import agent_pb2 as pb

ENVIRONMENTS_KEPT = 1000  # environments a session keeps ids and disk figures of (history)
SERVER_FIGURES = operator.itemgetter(*SERVER_SERIES)  # of host_metrics_data, in series order
# database, filestore, add-ons; filestore files, attachments missing, files orphaned:
# not measured yet
NO_DISK = (None,) * 6


async def _hello(gateway, session, hello):
    if not session.hello.done():
        session.hello.set_result(hello)


async def _heartbeat(gateway, session, beat):
    gateway.seen.add(session.server_id)  # recorded in batches
    metrics = await reports.heartbeat(session.watch, session.server_id, beat)
    if gateway.history:  # the metric history's: sampled by the flush (history_rows)
        minute = history.minute_now()
        if metrics is not None:  # the figures the alerts read: the beat is not held
            session.host_beat = (minute, metrics)
        if beat.environments:  # sent once a minute, CPU measured over it
            session.envs_beat = (minute, beat)


def history_rows(sessions):
    """(In the flush's thread.) The metric history's sample of each session for
    `history.write`: the latest host figures and the latest heartbeat with
    environments (each with the last disk figures its agent reported), once a
    minute each. A heartbeat only leaves references: gathering its rows at every
    heartbeat cost the event loop, and the collector, more than writing them."""
    rows = []
    for session in sessions:
        server, (host_at, envs_at) = session.server_id_hex, session.written
        host, envs = session.host_beat, session.envs_beat
        if host is not None and host[0] != host_at:
            host_at = host[0]
            rows.append(("server", server, server, host_at, 1, SERVER_FIGURES(host[1])))
        if envs is not None and envs[0] != envs_at:
            envs_at = envs[0]
            for env_id, values in itertools.islice(agent_link.environment_samples(envs[1]),
                                                   ENVIRONMENTS_KEPT):
                env = _hex(session, env_id)
                if env:
                    rows.append(("environment", env, server, envs_at, 1,
                                 values + session.disk.get(env, NO_DISK)))
        session.written = (host_at, envs_at)
    return rows


def _hex(session, value):
    """An id the agent sent, as the history stores it ('' when it is no id);
    remembered for the session's next heartbeats."""
    known = session.env_ids.get(value)
    if known is not None:
        return known
    try:
        hexed = uuid.UUID(value).hex
    except ValueError:
        hexed = ""
    if len(session.env_ids) < ENVIRONMENTS_KEPT:
        session.env_ids[value] = hexed
    return hexed


async def _reply(gateway, session, reply):
    waiting = session.pending.get(reply.correlation_id)
    if waiting is not None and not waiting.done():
        waiting.set_result(reply)


async def _ack(gateway, session, ack):
    session.in_flight.discard(ack.command_id)
    await reports.acknowledged(session.server_id, ack)


def _command(report):
    """A durable command's message, read as every agent's is (reports.py)."""
    async def handle(gateway, session, message):
        await report(session.server_id, message)
    return handle


async def _disk(gateway, session, report):
    usage = await reports.disk(session.server_id, report)
    for item in usage:  # the metric history's disk figures, until the next report
        env = _hex(session, item["environment_id"])
        if env and (env in session.disk or len(session.disk) < ENVIRONMENTS_KEPT):
            known = session.disk.get(env, NO_DISK)
            taken = {**item, **item.get("made_of", {})}
            session.disk[env] = tuple(
                taken[name] if isinstance(taken.get(name), int) and taken[name] >= 0 else was
                for name, was in zip(agent_link.DISK_FIGURES + agent_link.DISK_COUNTS, known,
                                     strict=True))


async def _proxy(gateway, session, report):
    await reports.proxy(session.server_id, report)


HANDLERS = {"hello": _hello, "heartbeat": _heartbeat, "reply": _reply, "ack": _ack,
            "log": _command(reports.logged), "phase": _command(reports.entered_phase),
            "result": _command(reports.finished), "disk": _disk, "proxy": _proxy,
            "shell": shells.deliver}


def due_commands(session):
    """(In a worker thread.) Undelivered commands as messages in the agent's
    revision, marked delivered (redelivered after a reconnect). A new stream's
    first batch also carries the acknowledged commands whose result never came:
    the agent re-sends a result from its journal, or one saying that a restart
    interrupted the command."""
    out = []
    due = queue.undelivered(session.server_id, exclude=session.in_flight,
                            resync=session.resync)
    session.resync = False
    for command in due:
        queue.mark_delivered(command.id)
        session.in_flight.add(command.id.hex)
        out.append(pb.ControlMessage(command=wire.command(
            command.id.hex, command.kind, configuration.for_agent(command.payload),
            session.revision)))
    return out
