"""The checks of servers reached over SSH (SshLink.check_all: the scheduler's job,
and at once when a server is added or its key accepted): every server at once,
each bounded by its own timeouts. A check is one `berth-agent check` (reachable
or not, and since when not; the host's size; its metrics and crash loops for the
fleet alerts; the proxy's state), installs the agent where there is none or an
older one (in the background), gives a new server its configuration, sends the
commands due to it, and measures the disk use every SSH_DISK_SECONDS."""

import asyncio
import logging
import uuid

from control_plane import __version__, agent_link
from control_plane.agent_link import NotConnected
from control_plane.gateway import ssh_commands, ssh_install
from control_plane.gateway.ssh_sessions import AgentMissing
from control_plane.models.metrics import SERVER_SERIES
from control_plane.services.servers import alerts, history, monitoring
from control_plane.services.servers import ssh as servers_ssh
from protocol import frames, wire
from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.ssh")


async def check_all(link, claim_for):
    ids = await asyncio.to_thread(servers_ssh.ssh_server_ids, claim_for)
    outcomes = await asyncio.gather(*(check(link, i) for i in ids))
    return dict(zip(ids, outcomes, strict=True))


async def check(link, server_id):
    target = await asyncio.to_thread(servers_ssh.target, server_id)
    if target is None:
        return None
    if server_id in link.installing:
        return "installing the agent"
    try:
        async with asyncio.timeout(link.connect_timeout + link.call_timeout):
            facts, beat, proxy = _answers(await link.invoke(target, "check", b""))
    except AgentMissing:  # none there yet (or one too old to know `check`): install it
        start_install(link, target)
        return "installing the agent"
    except (NotConnected, TimeoutError, ValueError) as exc:
        error = "did not answer in time" if isinstance(exc, TimeoutError) else str(exc)
        await asyncio.to_thread(servers_ssh.record_check, server_id, error=error)
        return error
    if facts.agent_version != __version__:  # installed by an older control plane
        start_install(link, target)
    if not target.configured:
        try:
            await ssh_install.configure(link, target)
        except (NotConnected, TimeoutError) as exc:
            log.warning("configuring the agent on server %s failed: %s", server_id, exc)
    await asyncio.to_thread(servers_ssh.record_check, server_id, facts={
        "cpu_cores": facts.cpu_cores, "ram_mb": facts.ram_mb, "disk_gb": facts.disk_gb,
        "hostname": facts.hostname[:255], "agent_version": facts.agent_version[:32]})
    await ssh_commands.deliver(link, server_id)
    await reports(link, target, beat, proxy)
    return None


def _answers(out):
    """`berth-agent check`'s three frames: (HostFacts, Heartbeat, ProxyReport or None)."""
    parts, rest = frames.split(out)
    if len(parts) != 3 or rest:
        raise ValueError("berth-agent check answered something else than its three parts")
    return (pb.HostFacts.FromString(parts[0]), pb.Heartbeat.FromString(parts[1]),
            pb.ProxyReport.FromString(parts[2]) if parts[2] else None)


def start_install(link, target):
    """The agent installed there from this control plane's wheelhouse, on a task of
    its own (minutes: the other servers' checks go on meanwhile)."""
    if target.server_id in link.installing:
        return
    link.installing.add(target.server_id)

    async def install():
        try:
            async with asyncio.timeout(link.settings["SSH_INSTALL_TIMEOUT"]):
                await ssh_install.install(link, target)
            link.forget_served(target.server_id)  # a `serve` of the old agent ends
            log.info("server %s: the agent is installed", target.server_id)
        except Exception as exc:  # noqa: BLE001 - whatever it was, it is recorded
            why = str(exc) or "did not finish in time"
            await asyncio.to_thread(servers_ssh.record_check, target.server_id,
                                    error=f"installing the agent failed: {why}")
        finally:
            link.installing.discard(target.server_id)
    asyncio.ensure_future(install())


async def reports(link, target, beat, proxy):
    """What a resident agent reports on its own: its heartbeat's figures (host
    metrics, crash loops) and the proxy's state, from the check's answer; the disk
    use every SSH_DISK_SECONDS (measuring it reads whole trees)."""
    watch = link.watches.setdefault(target.server_id, alerts.Watch())
    metrics = agent_link.host_metrics_data(beat.metrics) if beat.HasField("metrics") else None
    if changes := watch.observe(metrics, agent_link.crash_loops(beat)):
        await asyncio.to_thread(alerts.record_changes, target.server_id, changes)
    if metrics is not None and link.settings["METRICS_HISTORY"]:  # a sample per check
        server = uuid.UUID(str(target.server_id)).hex
        await asyncio.to_thread(history.write, [
            ("server", server, server, history.minute_now(), 1,
             [metrics[name] for name in SERVER_SERIES])])
    if proxy is not None:
        try:
            await asyncio.to_thread(monitoring.record_proxy, target.server_id,
                                    wire.proxy_state(proxy))
        except ValueError:
            pass  # not what an agent sends: ignored
    now = link.loop.time()
    if now - link.measured.get(target.server_id, -1e9) < link.settings["SSH_DISK_SECONDS"]:
        return
    try:
        async with asyncio.timeout(link.settings["SSH_DISK_SECONDS"]):
            report = pb.DiskReport.FromString(await link.invoke(target, "disk", b""))
    except (NotConnected, TimeoutError) as exc:
        log.warning("disk use of server %s: %s", target.server_id, exc)
        return
    link.measured[target.server_id] = now
    await asyncio.to_thread(monitoring.record_disk_usage, target.server_id,
                            agent_link.disk_usage(report))
