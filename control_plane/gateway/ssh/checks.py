"""The checks of servers reached over SSH (SshLink.check_all: the scheduler's job,
and at once when a server is added or its key accepted): every server at once,
each bounded by its own timeouts. A check is one `berth-agent check` (reachable
or not, and since when not; the host's size; its metrics and crash loops for the
fleet alerts; the proxy's state), installs the agent where there is none or an
older one (in the background), gives a new server its configuration, sends the
commands due to it, and measures the disk use every SSH_DISK_SECONDS (and at once
after a deploy or restore there)."""

import asyncio
import logging
import uuid

from control_plane import __version__
from control_plane.agent_link import NotConnected
from control_plane.gateway import reports
from control_plane.gateway.ssh.sessions import AgentMissing
from control_plane.models.metrics import SERVER_SERIES
from control_plane.services.servers import alerts, history
from control_plane.services.servers import ssh as servers_ssh
from protocol import frames
from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.ssh")


class Checks:
    def __init__(self, sessions, commands, installer):
        self.sessions, self.commands, self.installer = sessions, commands, installer
        self.sweep = None  # the Future of the check running now
        self.watches = {}  # server id -> alerts.Watch of its checks' figures
        self.measured = {}  # server id -> loop time of its last disk measurement

    async def all(self, claim_for):
        ids = await asyncio.to_thread(servers_ssh.ssh_server_ids, claim_for)
        outcomes = await asyncio.gather(*(self.one(i) for i in ids))
        return dict(zip(ids, outcomes, strict=True))

    async def one(self, server_id):
        """One server's check; None when it answered, else what went wrong."""
        sessions = self.sessions
        target = await asyncio.to_thread(servers_ssh.target, server_id)
        if target is None:
            return None
        if server_id in self.installer.installing:
            return "installing the agent"
        try:
            async with asyncio.timeout(sessions.connect_timeout + sessions.call_timeout):
                facts, beat, proxy = _answers(await sessions.invoke(target, "check", b""))
        except AgentMissing:  # none there yet (or one too old to know `check`): install it
            self.installer.start(target)
            return "installing the agent"
        except (NotConnected, TimeoutError, ValueError) as exc:
            error = "did not answer in time" if isinstance(exc, TimeoutError) else str(exc)
            await asyncio.to_thread(servers_ssh.record_check, server_id, error=error)
            return error
        if facts.agent_version != __version__:  # installed by an older control plane
            self.installer.start(target)
        if not target.configured:
            try:
                await self.installer.configure(target)
            except (NotConnected, TimeoutError) as exc:
                log.warning("configuring the agent on server %s failed: %s", server_id, exc)
        await asyncio.to_thread(servers_ssh.record_check, server_id, facts={
            "cpu_cores": facts.cpu_cores, "ram_mb": facts.ram_mb, "disk_gb": facts.disk_gb,
            "hostname": facts.hostname[:255], "agent_version": facts.agent_version[:32]})
        await self.commands.deliver(server_id)
        await self._reports(target, beat, proxy)
        return None

    async def _reports(self, target, beat, proxy):
        """What a resident agent reports on its own, read as a stream's reports are
        (gateway/reports.py): its heartbeat's figures and the proxy's state from the
        check's answer; the disk use every SSH_DISK_SECONDS (measuring it reads whole
        trees)."""
        settings, server_id = self.sessions.settings, target.server_id
        watch = self.watches.setdefault(server_id, alerts.Watch())
        metrics = await reports.heartbeat(watch, server_id, beat)
        if metrics is not None and settings["METRICS_HISTORY"]:  # a sample per check
            server = uuid.UUID(str(server_id)).hex
            await asyncio.to_thread(history.write, [
                ("server", server, server, history.minute_now(), 1,
                 [metrics[name] for name in SERVER_SERIES])])
        if proxy is not None:
            await reports.proxy(server_id, proxy)
        if (self.sessions.loop.time() - self.measured.get(server_id, -1e9)
                >= settings["SSH_DISK_SECONDS"]):
            await self.disk(target)

    async def disk(self, target):
        """The disk use of the server's environments, measured there and recorded."""
        server_id, now = target.server_id, self.sessions.loop.time()
        try:
            async with asyncio.timeout(self.sessions.settings["SSH_DISK_SECONDS"]):
                report = pb.DiskReport.FromString(await self.sessions.invoke(target, "disk", b""))
        except (NotConnected, TimeoutError) as exc:
            log.warning("disk use of server %s: %s", server_id, exc)
            return
        self.measured[server_id] = now
        await reports.disk(server_id, report)

    def disk_changed(self, server_id):
        """A deploy or restore succeeded there: its disk use is measured now (in the
        background, on the link's loop), as an agent's meter wakes after one, not at
        the next interval."""
        async def measure():
            target = await asyncio.to_thread(servers_ssh.target, server_id)
            if target is not None:
                await self.disk(target)
        asyncio.ensure_future(measure())


def _answers(out):
    """`berth-agent check`'s three frames: (HostFacts, Heartbeat, ProxyReport or None)."""
    parts, rest = frames.split(out)
    if len(parts) != 3 or rest:
        raise ValueError("berth-agent check answered something else than its three parts")
    return (pb.HostFacts.FromString(parts[0]), pb.Heartbeat.FromString(parts[1]),
            pb.ProxyReport.FromString(parts[2]) if parts[2] else None)
