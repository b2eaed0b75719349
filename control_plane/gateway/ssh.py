"""Servers reached over SSH: an `AgentLink` that runs `berth-agent` there, one
invocation per call, with the message on standard input (agent/remote.py).

- Live reads: `berth-agent live`, a LiveRequest in, its LiveReply out.
- Durable commands: `berth-agent exec` per command, its acknowledgement, task
  log and result read back as frames (protocol/frames.py) while it runs and
  recorded as the gateway records an agent's. The agent runs the command in a
  process of its own, so a dropped connection loses nothing: the next pass sends
  the command again (acknowledged, result-less commands too, as a new stream's
  resync does), and the agent, keyed by the command id, attaches to the run
  instead of starting another.
- Checks (`check_all`, a scheduler job): `berth-agent facts` on every SSH server,
  recording whether it answered, and since when not.

One asyncio loop in a daemon thread holds one SSH connection per server, reused
by its sessions. Bounds: a connection gets SSH_CONNECT_TIMEOUT seconds (TCP,
handshake, sign-in), a live call SSH_CALL_TIMEOUT; at most SSH_SESSIONS_PER_SERVER
sessions to one server and SSH_SESSIONS_TOTAL in all. A server that hangs holds
only its own sessions, each until its timeout: the others go on.

The host key: pinned at first contact (services/servers/ssh.py), then the only
one accepted; a different one is recorded and refused until an operator accepts it."""

import asyncio
import ipaddress
import json
import logging
import shlex
import socket
import threading

from control_plane import __version__, agent_link
from control_plane.agent_link import NotConnected
from control_plane.gateway import ssh_install
from control_plane.safe_input import storable
from control_plane.services.servers import monitoring
from control_plane.services.servers import ssh as servers_ssh
from control_plane.services.tasks import engine, queue
from protocol import frames, wire
from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.ssh")

# Host key algorithms asked for at first contact, best first (the one pinned).
FIRST_CONTACT_ALGS = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                      "ecdsa-sha2-nistp521", "rsa-sha2-512", "rsa-sha2-256"]
KEEPALIVE_SECONDS = 15  # a connection silent for 3 of these is dropped


class HostKeyChanged(NotConnected):
    """The server offered a host key other than the pinned one."""


class AgentMissing(NotConnected):
    """`berth-agent` is not installed there (the shell's 127: command not found)."""


class SshLink:
    @property
    def connect_timeout(self):
        return self.settings["SSH_CONNECT_TIMEOUT"]

    @property
    def call_timeout(self):
        return self.settings["SSH_CALL_TIMEOUT"]

    def __init__(self, settings):
        self.settings = settings  # read when used: PUBLIC_URL, SSH_AGENT_PATH, the timeouts
        self.per_server = settings["SSH_SESSIONS_PER_SERVER"]
        self.total = settings["SSH_SESSIONS_TOTAL"]
        self.loop = None
        self._start_lock = threading.Lock()
        self.connections = {}  # server id -> connection (or the Future of one being made)
        self.sessions = {}  # server id -> Semaphore
        self.following = set()  # command ids whose `exec` this process is reading
        self.sweep = None  # the Future of the check running now
        self.installing = set()  # server ids whose agent is being installed
        self.measured = {}  # server id -> loop time of its last disk measurement
        self.delivering = {}  # server id -> Lock: one look for due commands at a time

    # --- the loop ---------------------------------------------------------------------

    def _running_loop(self):
        with self._start_lock:
            if self.loop is None:
                ready = threading.Event()

                def run():
                    self.loop = asyncio.new_event_loop()
                    self.all_sessions = asyncio.Semaphore(self.total)
                    ready.set()
                    self.loop.run_forever()
                threading.Thread(target=run, name="berth-ssh", daemon=True).start()
                ready.wait()
        return self.loop

    def _run(self, coroutine, timeout):
        future = asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())
        return future.result(timeout)

    # --- AgentLink ----------------------------------------------------------------------

    def call(self, server_id, request, timeout):
        """A live request over SSH. NotConnected when the server cannot be reached
        (or its key changed), TimeoutError after `timeout` seconds."""
        target = servers_ssh.target(server_id)
        if target is None:
            raise NotConnected(str(server_id))
        timeout = min(timeout, self.call_timeout)

        async def ask():
            async with asyncio.timeout(timeout):
                out = await self._invoke(target, "live", request.SerializeToString())
            return pb.LiveReply.FromString(out)
        return self._run(ask(), timeout + 5)

    def wake(self, server_id):
        """Commands are queued for the server: send them now (in the background)."""
        asyncio.run_coroutine_threadsafe(self._deliver(str(server_id)), self._running_loop())

    # --- checks ----------------------------------------------------------------------------

    def check_all(self, claim_for=None):
        """Every SSH server at once: reachable or not, its facts, and the commands due
        to it. Runs on this link's loop and returns at once (a hung server must not
        hold the scheduler's other jobs): the Future of {server id: error or None},
        or the running sweep's while one runs. The scheduler's job passes its
        interval as `claim_for`: then only the servers it claims are checked."""
        if self.sweep is None or self.sweep.done():
            self.sweep = asyncio.run_coroutine_threadsafe(self._check_all(claim_for),
                                                          self._running_loop())
        return self.sweep

    async def _check_all(self, claim_for):
        ids = await asyncio.to_thread(servers_ssh.ssh_server_ids, claim_for)
        outcomes = await asyncio.gather(*(self._check(i) for i in ids))
        return dict(zip(ids, outcomes, strict=True))

    async def _check(self, server_id):
        target = await asyncio.to_thread(servers_ssh.target, server_id)
        if target is None:
            return None
        if server_id in self.installing:
            return "installing the agent"
        try:
            async with asyncio.timeout(self.connect_timeout + self.call_timeout):
                facts = pb.HostFacts.FromString(await self._invoke(target, "facts", b""))
        except AgentMissing:  # first contact: install it, in the background
            self._start_install(target)
            return "installing the agent"
        except (NotConnected, TimeoutError) as exc:
            error = str(exc) if isinstance(exc, NotConnected) else "did not answer in time"
            await asyncio.to_thread(servers_ssh.record_check, server_id, error=error)
            return error
        if facts.agent_version != __version__:  # installed by an older control plane
            self._start_install(target)
        if not target.configured:
            try:
                await self._configure(target)
            except (NotConnected, TimeoutError) as exc:
                log.warning("configuring the agent on server %s failed: %s", server_id, exc)
        await asyncio.to_thread(servers_ssh.record_check, server_id, facts={
            "cpu_cores": facts.cpu_cores, "ram_mb": facts.ram_mb, "disk_gb": facts.disk_gb,
            "hostname": facts.hostname[:255], "agent_version": facts.agent_version[:32]})
        await self._deliver(server_id)
        await self._reports(target)
        return None

    def _start_install(self, target):
        """The agent installed there from this control plane's wheelhouse, on a task of
        its own (minutes: the other servers' checks go on meanwhile)."""
        if target.server_id in self.installing:
            return
        self.installing.add(target.server_id)

        async def install():
            try:
                async with asyncio.timeout(self.settings["SSH_INSTALL_TIMEOUT"]):
                    await ssh_install.install(self, target)
                log.info("server %s: the agent is installed", target.server_id)
            except Exception as exc:  # noqa: BLE001 - whatever it was, it is recorded
                why = str(exc) or "did not finish in time"
                await asyncio.to_thread(servers_ssh.record_check, target.server_id,
                                        error=f"installing the agent failed: {why}")
            finally:
                self.installing.discard(target.server_id)
        asyncio.ensure_future(install())

    async def _reports(self, target):
        """What a resident agent reports on its own: the proxy's state at every check,
        the disk use every SSH_DISK_SECONDS (measuring it reads whole trees)."""
        try:
            async with asyncio.timeout(self.call_timeout):
                out = await self._invoke(target, "proxy", b"")
            if out:
                state = wire.proxy_state(pb.ProxyReport.FromString(out))
                await asyncio.to_thread(monitoring.record_proxy, target.server_id, state)
            now = self.loop.time()
            if now - self.measured.get(target.server_id, -1e9) >= self.settings["SSH_DISK_SECONDS"]:
                async with asyncio.timeout(self.settings["SSH_DISK_SECONDS"]):
                    report = pb.DiskReport.FromString(await self._invoke(target, "disk", b""))
                self.measured[target.server_id] = now
                await asyncio.to_thread(monitoring.record_disk_usage, target.server_id,
                                        agent_link.disk_usage(report))
        except (NotConnected, TimeoutError, ValueError) as exc:
            log.warning("reports of server %s: %s", target.server_id, exc)

    async def _configure(self, target):
        """First contact: the agent there gets its configuration and a credential
        (on standard input); its digest is kept once the server has it."""
        credential = servers_ssh.new_credential()
        conf = {"control_plane": self.settings["PUBLIC_URL"],
                "grpc_address": self.settings.get("GRPC_PUBLIC_ADDRESS") or "",
                "server_id": target.server_id, "credential": credential}
        async with asyncio.timeout(self.call_timeout):
            await self._invoke(target, "configure", json.dumps(conf).encode())
        await asyncio.to_thread(servers_ssh.keep_credential, target.server_id, credential)

    # --- durable commands --------------------------------------------------------------------

    async def _deliver(self, server_id):
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
                asyncio.ensure_future(self._exec(target, message))

    async def _exec(self, target, message):
        """Run or attach to one command, recording what comes back as it comes."""
        server_id = target.server_id
        try:
            async with self._session(server_id):
                conn = await self._connection(target)
                process = await conn.create_process(self._command(target, "exec"), encoding=None)
                process.stdin.write(message.SerializeToString())
                process.stdin.write_eof()
                buffer = b""
                while chunk := await process.stdout.read(65536):
                    whole, buffer = frames.split(buffer + chunk)
                    for data in whole:
                        await _record(server_id, pb.AgentMessage.FromString(data))
                ended = await process.wait()
                if ended.exit_status:
                    why = (ended.stderr or b"").decode(errors="replace").strip()[-300:]
                    raise NotConnected(f"berth-agent exec exited with {ended.exit_status}: {why}")
        except Exception as exc:  # the next pass sends it again; the agent attaches
            log.warning("command %s on server %s: the SSH session ended: %s", message.id,
                        server_id, exc)
        finally:
            self.following.discard(message.id)

    # --- SSH ------------------------------------------------------------------------------------

    def _command(self, target, name):
        # A setting, never user data; another user than root goes through sudo.
        return ssh_install.as_root(target.username,
                                   f"{shlex.quote(self.settings['SSH_AGENT_PATH'])} {name}")

    def _session(self, server_id):
        """The per-server and total bounds on open sessions."""
        per_server = self.sessions.setdefault(server_id, asyncio.Semaphore(self.per_server))
        return _Both(per_server, self.all_sessions)

    async def _invoke(self, target, name, stdin):
        """One `berth-agent NAME` over SSH; its standard output, or NotConnected."""
        async with self._session(target.server_id):
            conn = await self._connection(target)
            try:
                result = await conn.run(self._command(target, name), input=stdin, encoding=None,
                                        check=False)
            except OSError as exc:
                self._forget(target.server_id, conn)
                raise NotConnected(f"the SSH connection broke: {exc}") from None
            if result.exit_status != 0:
                why = (result.stderr or b"").decode(errors="replace").strip()[-300:]
                failed = AgentMissing if result.exit_status == 127 else NotConnected
                raise failed(f"berth-agent {name} exited with {result.exit_status}: {why}")
            return result.stdout

    async def _connection(self, target):
        """The server's connection, made (once, for all waiting on it) when missing."""
        import asyncssh

        held = self.connections.get(target.server_id)
        if isinstance(held, asyncio.Future):
            return await asyncio.shield(held)
        if held is not None and not held.is_closed():
            return held
        made = self.connections[target.server_id] = self.loop.create_future()
        try:
            conn = await asyncio.wait_for(self._connect(target), self.connect_timeout)
        except BaseException as exc:
            self.connections.pop(target.server_id, None)
            if isinstance(exc, asyncio.TimeoutError):
                exc = NotConnected(f"no SSH connection within {self.connect_timeout} s")
            elif isinstance(exc, (OSError, asyncssh.Error)):
                exc = NotConnected(f"SSH connection failed: {exc}")
            made.set_exception(exc)
            made.exception()  # read: no "never retrieved" warning when nobody else waits
            raise exc from None
        self.connections[target.server_id] = conn
        made.set_result(conn)
        return conn

    async def _connect(self, target):
        import asyncssh

        if target.refused_key:
            raise HostKeyChanged("the server's host key changed: all contact is stopped "
                                 "until an operator accepts the new key")
        address = await self._address(target.host, target.port)
        pinned = target.host_key
        if pinned is None:  # first contact: trust the key offered, and pin it
            offered = await asyncssh.get_server_host_key(
                address, target.port, server_host_key_algs=FIRST_CONTACT_ALGS,
                config=None)
            if offered is None:
                raise NotConnected("the server offered no host key")
            offered_line = _line(offered)
            if not await asyncio.to_thread(servers_ssh.pin_host_key, target.server_id,
                                           offered_line):  # pinned meanwhile
                return await self._connect(await asyncio.to_thread(servers_ssh.target,
                                                                   target.server_id))
            pinned = offered_line
        key = asyncssh.import_public_key(pinned)
        try:
            return await asyncssh.connect(
                address, target.port, username=target.username, config=None,
                known_hosts=([key], [], []), client_keys=[
                    asyncssh.import_private_key(target.client_key)],
                agent_path=None, password=None, preferred_auth="publickey",
                keepalive_interval=KEEPALIVE_SECONDS, keepalive_count_max=3)
        except asyncssh.HostKeyNotVerifiable:
            offered = await asyncssh.get_server_host_key(
                address, target.port, server_host_key_algs=[key.get_algorithm()],
                config=None)
            if offered is not None:
                await asyncio.to_thread(servers_ssh.host_key_changed, target.server_id,
                                        _line(offered))
            raise HostKeyChanged("the server's host key is not the pinned one: all contact "
                                 "is stopped until an operator accepts the new key") from None

    async def _address(self, host, port):
        """The address to connect to: the host's first, which must be a public one
        unless SSH_ALLOW_PRIVATE (a customer's server is no way into the control
        plane's own network). Connecting to the address checked, not the name
        again, leaves no room for a second, different answer."""
        try:
            infos = await self.loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise NotConnected(f"the host name does not resolve: {exc}") from None
        address = infos[0][4][0]
        if not self.settings["SSH_ALLOW_PRIVATE"] and not ipaddress.ip_address(address).is_global:
            raise NotConnected(f"{host} is a private or local address ({address}); the "
                               "control plane reaches only public ones (CP_SSH_ALLOW_PRIVATE)")
        return address

    def _forget(self, server_id, conn):
        if self.connections.get(server_id) is conn:
            del self.connections[server_id]
        conn.close()

    def close(self):
        if self.loop is not None:
            for conn in list(self.connections.values()):
                if not isinstance(conn, asyncio.Future):
                    self.loop.call_soon_threadsafe(conn.close)


class Reach:
    """The AgentLink services hold: SSH servers over SSH, the others through the
    gateway (or the Redis relay) when there is one."""

    def __init__(self, link, ssh):
        self.link, self.ssh = link, ssh

    def _for(self, server_id):
        if servers_ssh.is_ssh(server_id):
            return self.ssh
        if self.link is None:
            raise NotConnected(str(server_id))
        return self.link

    def call(self, server_id, request, timeout):
        return self._for(server_id).call(server_id, request, timeout)

    def wake(self, server_id):
        try:
            self._for(server_id).wake(server_id)
        except NotConnected:
            pass  # no gateway in this process: its poll delivers


class _Both:
    def __init__(self, *semaphores):
        self.semaphores = semaphores

    async def __aenter__(self):
        taken = []
        try:
            for s in self.semaphores:
                await s.acquire()
                taken.append(s)
        except BaseException:  # cancelled (a timeout) while waiting: give back what was taken
            for s in reversed(taken):
                s.release()
            raise

    async def __aexit__(self, *exc):
        for s in reversed(self.semaphores):
            s.release()


def _line(key):
    return " ".join(key.export_public_key("openssh").decode().split()[:2])


def _for_agent(payload):
    from control_plane.services.environment_settings import configuration

    return configuration.for_agent(payload)


async def _record(server_id, message):
    """What `exec` sent, recorded as the gateway records an agent's messages."""
    kind = message.WhichOneof("body")
    if kind == "ack":
        if message.ack.duplicate:
            log.info("server %s: command %s was already started there; following it",
                     server_id, message.ack.command_id)
        await asyncio.to_thread(engine.record_ack, server_id, message.ack.command_id)
    elif kind == "log":
        line = message.log
        await asyncio.to_thread(queue.append_logs, server_id, [
            (line.command_id, line.seq, line.level, storable(line.message))])
    elif kind == "result":
        r = message.result
        result = storable(json.loads(r.result_json)) if r.result_json else None
        await asyncio.to_thread(engine.record_result, server_id, r.command_id, r.ok, result,
                                storable(r.error))

