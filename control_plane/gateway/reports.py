"""What an agent reports, read once: the gateway's stream handlers (messages.py)
and the SSH link's commands and checks (ssh/) hand each report to these. The
durable commands' messages (acknowledgement, task log line, phase, result) and
the reports an agent makes on its own (heartbeat figures, proxy, disk use).

They run on an asyncio loop; database work goes to a worker thread."""

import asyncio
import json

from control_plane import agent_link
from control_plane.inputs.safe_input import storable
from control_plane.services.servers import alerts, monitoring
from control_plane.services.tasks import engine, queue
from protocol import wire

# --- a durable command's messages -------------------------------------------------------

async def acknowledged(server_id, ack):
    await asyncio.to_thread(engine.record_ack, server_id, ack.command_id)


async def logged(server_id, line):
    await asyncio.to_thread(queue.append_logs, server_id, [
        (line.command_id, line.seq, line.level, storable(line.message))])


async def entered_phase(server_id, phase):
    await asyncio.to_thread(engine.record_phase, server_id, phase.command_id, phase.phase)


async def finished(server_id, r):
    result = storable(json.loads(r.result_json)) if r.result_json else None
    await asyncio.to_thread(engine.record_result, server_id, r.command_id, r.ok, result,
                            storable(r.error))


COMMAND_MESSAGES = {"ack": acknowledged, "log": logged, "phase": entered_phase,
                    "result": finished}


async def command_message(server_id, message):
    """One of a durable command's messages (an AgentMessage); others are ignored."""
    kind = message.WhichOneof("body")
    if kind in COMMAND_MESSAGES:
        await COMMAND_MESSAGES[kind](server_id, getattr(message, kind))


# --- what an agent reports on its own ------------------------------------------------------

async def heartbeat(watch, server_id, beat):
    """The fleet alerts' figures of a heartbeat (host metrics, crash loops),
    followed by the server's `watch` and written only when they change; returns
    the host metrics (None when the beat has none)."""
    metrics = agent_link.host_metrics_data(beat.metrics) if beat.HasField("metrics") else None
    if changes := watch.observe(metrics, agent_link.crash_loops(beat)):
        await asyncio.to_thread(alerts.record_changes, server_id, changes)
    return metrics


async def proxy(server_id, report):
    try:
        state = wire.proxy_state(report)
    except ValueError:
        return  # not what an agent sends: ignored
    await asyncio.to_thread(monitoring.record_proxy, server_id, state)


async def disk(server_id, report):
    """The environments' disk use; returns it as agent_link.disk_usage reads it."""
    usage = agent_link.disk_usage(report)
    await asyncio.to_thread(monitoring.record_disk_usage, server_id, usage)
    return usage
