"""What crosses an agent's stream, seen from the gateway: one handler per kind of
message the agent sends (`HANDLERS`, the `AgentMessage.body` names), and the
durable commands sent to it, in the agent's protocol revision (`due_commands`).

Handlers run on the gateway's event loop; database work goes to a worker thread.
A kind with no handler (from an agent newer than this gateway) is ignored."""

import asyncio
import json

from control_plane import agent_link
from control_plane.safe_input import storable
from control_plane.services.environment_settings import configuration
from control_plane.services.servers import alerts, monitoring
from control_plane.services.tasks import engine, queue
from protocol import wire
from protocol.v1 import agent_pb2 as pb


async def _hello(gateway, session, hello):
    if not session.hello.done():
        session.hello.set_result(hello)


async def _heartbeat(gateway, session, beat):
    gateway.seen.add(session.server_id)  # recorded in batches
    # The fleet alerts' figures: followed here, written only when they change.
    metrics = agent_link.host_metrics_data(beat.metrics) if beat.HasField("metrics") else None
    changes = session.watch.observe(metrics, agent_link.crash_loops(beat))
    if changes:
        await asyncio.to_thread(alerts.record_changes, session.server_id, changes)


async def _reply(gateway, session, reply):
    waiting = session.pending.get(reply.correlation_id)
    if waiting is not None and not waiting.done():
        waiting.set_result(reply)


async def _ack(gateway, session, ack):
    session.in_flight.discard(ack.command_id)
    await asyncio.to_thread(engine.record_ack, session.server_id, ack.command_id)


async def _log(gateway, session, line):
    await asyncio.to_thread(queue.append_logs, session.server_id, [
        (line.command_id, line.seq, line.level, storable(line.message))])


async def _result(gateway, session, r):
    result = storable(json.loads(r.result_json)) if r.result_json else None
    await asyncio.to_thread(engine.record_result, session.server_id, r.command_id, r.ok,
                            result, storable(r.error))


async def _disk(gateway, session, report):
    await asyncio.to_thread(monitoring.record_disk_usage, session.server_id,
                            agent_link.disk_usage(report))


async def _proxy(gateway, session, report):
    try:
        state = wire.proxy_state(report)
    except ValueError:
        return  # not what an agent sends: ignored
    await asyncio.to_thread(monitoring.record_proxy, session.server_id, state)


HANDLERS = {"hello": _hello, "heartbeat": _heartbeat, "reply": _reply, "ack": _ack,
            "log": _log, "result": _result, "disk": _disk, "proxy": _proxy}


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
