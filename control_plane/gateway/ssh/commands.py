"""Durable commands to servers reached over SSH: one `berth-agent exec` per command,
its acknowledgement, task log and result read back as frames (protocol/frames.py)
while it runs, and recorded as the gateway records an agent's (gateway/reports.py).
The agent runs the command in a process of its own, so a dropped connection loses
nothing: the next pass sends the command again (acknowledged, result-less commands
too, as a new stream's resync does) and the agent, keyed by the command id,
attaches to the run instead of starting another."""

import asyncio
import logging

from control_plane.agent_link import NotConnected
from control_plane.gateway import reports
from control_plane.services.servers import ssh as servers_ssh
from control_plane.services.tasks import queue
from protocol import frames, wire
from protocol.kinds import DISK_CHANGING
from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.ssh")


class Commands:
    def __init__(self, sessions, disk_changed=None):
        self.sessions = sessions
        self.disk_changed = disk_changed  # called with a server id after a deploy or restore
        self.following = set()  # command ids whose `exec` this process is reading
        self.delivering = {}  # server id -> Lock: one look for due commands at a time

    async def deliver(self, server_id):
        """Each command not acknowledged, or acknowledged without a result, that this
        process is not already following: one `exec` each, in the background."""
        async with self.delivering.setdefault(server_id, asyncio.Lock()):
            due = await asyncio.to_thread(queue.undelivered, server_id,
                                          exclude=set(self.following), resync=True)
            target = await asyncio.to_thread(servers_ssh.target, server_id) if due else None
            for command in due if target is not None else ():
                self.following.add(command.id.hex)
                await asyncio.to_thread(queue.mark_delivered, command.id)
                message = wire.command(command.id.hex, command.kind,
                                       await asyncio.to_thread(_for_agent, command.payload),
                                       wire.REVISION)
                asyncio.ensure_future(self.run(target, message))

    async def run(self, target, message):
        """Run or attach to one command, recording what comes back as it comes."""
        server_id, sessions = target.server_id, self.sessions
        try:
            async with sessions.command_session(server_id):
                conn = await sessions.connection(target)
                process = await conn.create_process(sessions.command(target, "exec"),
                                                    encoding=None)
                process.stdin.write(message.SerializeToString())
                process.stdin.write_eof()
                buffer = b""
                while chunk := await process.stdout.read(65536):
                    whole, buffer = frames.split(buffer + chunk)
                    for data in whole:
                        reply = pb.AgentMessage.FromString(data)
                        await _record(server_id, reply)
                        if (reply.WhichOneof("body") == "result" and reply.result.ok
                                and message.kind in DISK_CHANGING and self.disk_changed):
                            self.disk_changed(server_id)
                ended = await process.wait()
                if ended.exit_status:
                    why = (ended.stderr or b"").decode(errors="replace").strip()[-300:]
                    raise NotConnected(f"berth-agent exec exited with {ended.exit_status}: "
                                       f"{why}")
        except Exception as exc:  # the next pass sends it again; the agent attaches
            log.warning("command %s on server %s: the SSH session ended: %s", message.id,
                        server_id, exc)
        finally:
            self.following.discard(message.id)


def _for_agent(payload):
    from control_plane.services.environment_settings import configuration

    return configuration.for_agent(payload)


async def _record(server_id, message):
    """What `exec` sent, recorded as the gateway records an agent's messages."""
    if message.WhichOneof("body") == "ack" and message.ack.duplicate:
        log.info("server %s: command %s was already started there; following it",
                 server_id, message.ack.command_id)
    await reports.command_message(server_id, message)
