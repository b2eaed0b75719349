"""SSH connections to the servers reached that way: one asyncio loop in a daemon
thread, one connection per server reused by its sessions, and `invoke` of one
`berth-agent` command with its message on stdin (the other parts of the link
use these).

Bounds: a connection gets SSH_CONNECT_TIMEOUT seconds (TCP, handshake, sign-in);
at most SSH_SESSIONS_PER_SERVER sessions to one server and SSH_SESSIONS_TOTAL in
all. A server that hangs holds only its own sessions, each until its timeout.

The host key: pinned at first contact (services/servers/ssh.py), then the only
one accepted; a different one is recorded and refused until an operator accepts
it. The address: a public one unless SSH_ALLOW_PRIVATE."""

import asyncio
import ipaddress
import logging
import shlex
import socket
import threading

from control_plane.agent_link import HostKeyChanged, NotConnected
from control_plane.services.environment_settings import dns_check
from control_plane.services.servers import ssh as servers_ssh
from control_plane.vocabulary.errors import ApiError

log = logging.getLogger("berth.ssh")

# Host key algorithms asked for at first contact, best first (the one pinned).
FIRST_CONTACT_ALGS = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                      "ecdsa-sha2-nistp521", "rsa-sha2-512", "rsa-sha2-256"]
KEEPALIVE_SECONDS = 15  # a connection silent for 3 of these is dropped
COMMANDS_PER_SERVER = 4  # commands followed at once on one server (more wait their turn)
SERVED = ("live", "check")  # the calls `berth-agent serve` answers (agent/over_ssh.py)
NO_SERVE_SECONDS = 600  # a server whose `serve` failed at once: single calls meanwhile


def as_root(username, command):
    """`command` as root: directly for root, else through `sudo -n` (passwordless
    sudo is then required; the installer and the agent need root)."""
    return command if username == "root" else f"sudo -n {command}"


class AgentMissing(NotConnected):
    """`berth-agent` is not installed there (the shell's 127: command not found), or
    is too old to know the command (argparse's 2)."""


class Sessions:
    """The link's loop, one connection per server (host keys checked), bounded
    sessions, and `invoke` of one `berth-agent` command."""

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
        # server id (or (server id, name) for one apart) -> connection (or the Future
        # of one being made)
        self.connections = {}
        self.sessions = {}  # server id -> Semaphore of its calls
        self.command_slots = {}  # server id -> Semaphore of the commands followed
        self.served = {}  # server id -> its `berth-agent serve` (_Served)
        self.no_serve = {}  # server id -> loop time until which it gets single calls

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

    def run(self, coroutine, timeout):
        """(From another thread.) `coroutine` on the loop; its result."""
        return self.submit(coroutine).result(timeout)

    def submit(self, coroutine):
        """(From another thread.) `coroutine` on the loop, in the background: its Future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())

    def command(self, target, name):
        # A setting, never user data; another user than root goes through sudo.
        return as_root(target.username, f"{shlex.quote(self.settings['SSH_AGENT_PATH'])} {name}")

    def session(self, server_id):
        """The per-server and total bounds on open sessions (calls: live reads, checks,
        installs)."""
        per_server = self.sessions.setdefault(server_id, asyncio.Semaphore(self.per_server))
        return _Both(per_server, self.all_sessions)

    def command_session(self, server_id):
        """The bound on commands followed at once on one server: apart from the calls'
        (a backup followed for an hour must not hold a check's turn), and together
        with them under sshd's default of 10 sessions a connection."""
        return _Both(self.command_slots.setdefault(server_id,
                                                   asyncio.Semaphore(COMMANDS_PER_SERVER)))

    async def invoke(self, target, name, stdin):
        """One `berth-agent NAME` over SSH; its standard output, or NotConnected.
        `live` and `check` go to the server's `berth-agent serve` when it is free."""
        import asyncssh

        async with self.session(target.server_id):
            conn = await self.connection(target)
            if name in SERVED:
                answered, out = await self._served_call(target, conn, name, stdin)
                if answered:
                    return out
            try:
                # No input: standard input closed at once (`input=b""` would leave it
                # open, and a reader of it waiting).
                io = {"input": stdin} if stdin else {"stdin": asyncssh.DEVNULL}
                result = await conn.run(self.command(target, name), encoding=None,
                                        check=False, **io)
            except OSError as exc:
                self._forget(target.server_id, conn)
                raise NotConnected(f"the SSH connection broke: {exc}") from None
            if result.exit_status != 0:
                why = (result.stderr or b"").decode(errors="replace").strip()[-300:]
                # 127: no such command; 2: a `berth-agent` too old to know this one.
                failed = AgentMissing if result.exit_status in (127, 2) else NotConnected
                raise failed(f"berth-agent {name} exited with {result.exit_status}: {why}")
            return result.stdout

    async def _served_call(self, target, conn, name, stdin):
        """(True, the answer) from the server's `serve` process, started when
        missing; (False, None) to make a single call instead: it is busy with
        another call, or failed (then, if it failed at once, for NO_SERVE_SECONDS)."""
        server_id = target.server_id
        if self.no_serve.get(server_id, 0) > self.loop.time():
            return False, None
        served = self.served.get(server_id)
        if served is None or served.conn is not conn or served.closed:
            import asyncssh

            try:
                process = await conn.create_process(self.command(target, "serve"),
                                                    encoding=None)
            except (OSError, asyncssh.Error):  # no session to be had now (sshd's limit)
                return False, None
            served = self.served[server_id] = _Served(conn, process)
        if served.lock.locked():
            return False, None
        try:
            answer = await served.call(name, stdin or b"")
        except (_ServeBroke, asyncio.CancelledError) as exc:
            if served.calls == 0:  # no `serve` there (an agent before it), or it hangs
                self.no_serve[server_id] = self.loop.time() + NO_SERVE_SECONDS
            if isinstance(exc, asyncio.CancelledError):
                raise  # the caller's timeout
            return False, None
        if answer[:1] != b"\0":
            raise NotConnected(f"berth-agent {name}: {answer[1:].decode(errors='replace')}")
        return True, answer[1:]

    def forget_served(self, server_id):
        """(On the loop.) The server's `serve` ends (its agent was just reinstalled)."""
        served = self.served.pop(server_id, None)
        if served is not None:
            served.close()
        self.no_serve.pop(server_id, None)

    async def connection(self, target, apart=None):
        """The server's connection, made (once, for all waiting on it) when missing.
        `apart`: the name of another connection to the server, for sessions kept off
        the calls' and commands' one (shells.py)."""
        import asyncssh

        key = target.server_id if apart is None else (target.server_id, apart)
        held = self.connections.get(key)
        if isinstance(held, asyncio.Future):
            return await asyncio.shield(held)
        if held is not None and not held.is_closed():
            return held
        made = self.connections[key] = self.loop.create_future()
        try:
            conn = await asyncio.wait_for(self._connect(target), self.connect_timeout)
        except BaseException as exc:
            self.connections.pop(key, None)
            if isinstance(exc, asyncio.TimeoutError):
                exc = NotConnected(f"no SSH connection within {self.connect_timeout} s")
            elif isinstance(exc, (OSError, asyncssh.Error)):
                exc = NotConnected(f"SSH connection failed: {exc}")
            made.set_exception(exc)
            made.exception()  # read: no "never retrieved" warning when nobody else waits
            raise exc from None
        self.connections[key] = conn
        made.set_result(conn)
        return conn

    async def _connect(self, target):
        import asyncssh

        if target.refused_key:
            raise HostKeyChanged("the server's host key changed: all contact is stopped "
                                 "until an operator accepts the new key")
        address = await self._address(target.host, target.port)
        options = dict(username=target.username, config=None, agent_path=None, password=None,
                       client_keys=[asyncssh.import_private_key(target.client_key)],
                       preferred_auth="publickey", keepalive_interval=KEEPALIVE_SECONDS,
                       keepalive_count_max=3)
        if target.host_key is None:
            return await self._first_contact(target, address, options)
        key = asyncssh.import_public_key(target.host_key)
        try:
            return await asyncssh.connect(address, target.port, known_hosts=([key], [], []),
                                          **options)
        except asyncssh.HostKeyNotVerifiable:
            offered = await asyncssh.get_server_host_key(
                address, target.port, server_host_key_algs=[key.get_algorithm()],
                config=None)
            if offered is not None:
                await asyncio.to_thread(servers_ssh.host_key_changed, target.server_id,
                                        _line(offered))
            raise HostKeyChanged("the server's host key is not the pinned one: all contact "
                                 "is stopped until an operator accepts the new key") from None

    async def _first_contact(self, target, address, options):
        """Trust the key the server offers and pin it, on the one connection kept
        (one handshake, not one to learn the key and another to use it). Pinned
        even when signing in fails: its fingerprint shows while the operator adds
        the organization's key there."""
        import asyncssh

        offered = []

        class FirstContact(asyncssh.SSHClient):
            def validate_host_public_key(self, host, addr, port, key):
                offered.append(key)
                return True

        try:
            conn = await asyncssh.connect(
                address, target.port, known_hosts=([], [], []), client_factory=FirstContact,
                server_host_key_algs=FIRST_CONTACT_ALGS, **options)
        except BaseException:
            if offered:
                await asyncio.to_thread(servers_ssh.pin_host_key, target.server_id,
                                        _line(offered[0]))
            raise
        line = _line(offered[0])
        if await asyncio.to_thread(servers_ssh.pin_host_key, target.server_id, line):
            return conn
        # Pinned meanwhile (another process): this connection is kept only if the
        # server offered that same key.
        now = await asyncio.to_thread(servers_ssh.target, target.server_id)
        if now is not None and now.host_key and _line(
                asyncssh.import_public_key(now.host_key)) == line:
            return conn
        conn.close()
        if now is None:
            raise NotConnected(str(target.server_id))
        return await self._connect(now)

    async def _address(self, host, port):
        """The address to connect to: the host's first, which must be a public one
        unless SSH_ALLOW_PRIVATE (a customer's server is no way into the control
        plane's own network). Connecting to the address checked, not the name
        again, leaves no room for a second, different answer."""
        try:
            address = str(ipaddress.ip_address(host))
        except ValueError:
            address = await self._resolve(host, port)
        if not self.settings["SSH_ALLOW_PRIVATE"] and not ipaddress.ip_address(address).is_global:
            raise NotConnected(f"{host} is a private or local address ({address}); the "
                               "control plane reaches only public ones (CP_SSH_ALLOW_PRIVATE)")
        return address

    async def _resolve(self, host, port):
        """At the resolver of DNS_RESOLVER when one is set (as custom domains' checks
        are), else the system's."""
        try:
            if self.settings.get("DNS_RESOLVER"):
                found = await asyncio.to_thread(
                    dns_check.Resolver.from_settings(self.settings).addresses, host)
            else:
                found = [info[4][0] for info in await self.loop.getaddrinfo(
                    host, port, type=socket.SOCK_STREAM)]
        except (OSError, ApiError) as exc:
            raise NotConnected(f"the host name does not resolve: {exc}") from None
        if not found:
            raise NotConnected(f"{host} has no address")
        return found[0]

    def _forget(self, server_id, conn):
        if self.connections.get(server_id) is conn:
            del self.connections[server_id]
        conn.close()

    def forget(self, server_id, apart=None):
        """(On the loop.) Close the server's connection (or its `apart` one), if held."""
        conn = self.connections.pop(server_id if apart is None else (server_id, apart), None)
        if conn is not None and not isinstance(conn, asyncio.Future):
            conn.close()

    def close(self):
        if self.loop is not None:
            for conn in list(self.connections.values()):
                if not isinstance(conn, asyncio.Future):
                    self.loop.call_soon_threadsafe(conn.close)


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


class _ServeBroke(Exception):
    """The `serve` process ended or its stream broke."""


class _Served:
    """A server's `berth-agent serve`: one call at a time over its session. A call
    cut short (a timeout, a broken stream) closes it: the next call starts another."""

    def __init__(self, conn, process):
        self.conn, self.process = conn, process
        self.lock, self.calls, self.closed = asyncio.Lock(), 0, False

    async def call(self, name, data):
        from protocol import frames

        async with self.lock:
            try:
                self.process.stdin.write(frames.pack(name.encode() + b"\n" + data))
                (size,) = frames.HEADER.unpack(await self.process.stdout.readexactly(
                    frames.HEADER.size))
                if size > frames.MAX_FRAME:
                    raise ValueError(f"a frame of {size} bytes")
                answer = await self.process.stdout.readexactly(size)
            except BaseException as exc:
                self.close()
                if isinstance(exc, Exception):
                    raise _ServeBroke(str(exc)) from None
                raise  # cancelled: the caller's timeout
            self.calls += 1
            return answer

    def close(self):
        if not self.closed:
            self.closed = True
            self.process.close()
