"""The agent gateway: a grpc.aio server holding one bidirectional stream per
connected server.

Database work runs in worker threads (peewee is synchronous); the event loop
only moves messages. HTTP threads reach a connected agent through
`Gateway.call()` (live requests) and `Gateway.wake()` (new durable commands):
the gateway is an `agent_link.AgentLink`."""

import asyncio
import gc
import logging
import threading
import uuid

import grpc

from control_plane.agent_link import NotConnected
from control_plane.gateway import messages, shells
from control_plane.infra.config import Config
from control_plane.infra.observability import AGENT_WAKEUPS, AGENTS_CONNECTED
from control_plane.services import agents
from control_plane.services.servers import alerts, history
from control_plane.services.tasks import queue
from control_plane.vocabulary import errors
from control_plane.vocabulary.errors import ApiError
from protocol import wire
from protocol.v1 import agent_pb2 as pb
from protocol.v1 import agent_pb2_grpc as pb_grpc

log = logging.getLogger("berth.gateway")

POLL_SECONDS = 5  # fallback delivery when a wake-up was missed (another process)
SEEN_FLUSH_SECONDS = 5  # heartbeats are recorded in batches

# Keepalive that survives NAT and proxies: HTTP/2 pings every ~60 s, and the
# application's own heartbeats on top.
SERVER_OPTIONS = [
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 0),
]
# A connection that has not finished its handshake (TLS, the HTTP/2 preface) in
# CP_GRPC_HANDSHAKE_TIMEOUT seconds is closed (grpc's own default would hold it for
# a minute); an agent does it in milliseconds. Open connections beyond
# CP_GRPC_MAX_CONNECTIONS are closed as they arrive, before they use up the
# process's descriptors. Per source address, the balancer bounds them
# (deploy/haproxy.cfg): behind it, every connection comes from its address.
HANDSHAKE_TIMEOUT = Config.GRPC_HANDSHAKE_TIMEOUT
MAX_CONNECTIONS = Config.GRPC_MAX_CONNECTIONS


def server_options(handshake_timeout=HANDSHAKE_TIMEOUT, max_connections=MAX_CONNECTIONS):
    return SERVER_OPTIONS + [
        ("grpc.server_handshake_timeout_ms", int(handshake_timeout * 1000)),
        ("grpc.max_allowed_incoming_connections", int(max_connections)),
    ]

REGISTER_ERRORS = {  # domain code -> gRPC status
    errors.TokenInvalid.code: grpc.StatusCode.UNAUTHENTICATED,
    errors.TokenExpired.code: grpc.StatusCode.UNAUTHENTICATED,
    errors.TokenRevoked.code: grpc.StatusCode.PERMISSION_DENIED,
    errors.TokenConsumed.code: grpc.StatusCode.ALREADY_EXISTS,
}


# Garbage collection in a process holding thousands of streams (a few hundred objects
# each): with Python's defaults (700, 10, 10), objects alive at a young collection are
# promoted in such numbers that a full collection ran every ~7 s and stopped the loop
# for up to 470 ms at 5,000 streams (measured: live p99 482-496 ms). With a young
# generation of 50,000, most die before they are looked at: no full collection in a
# 90 s run at 5,000 streams, young ones up to ~65 ms, the same total time. Cyclic
# garbage that reaches the old generation waits longer (after 200 young collections).
GC_THRESHOLDS = (50_000, 20, 10)
_gc_tuned = False


def _tune_gc():
    """Once a process: what start-up made (modules, the app) is never garbage, so it
    leaves the collector's view; then the thresholds above."""
    global _gc_tuned
    if not _gc_tuned:
        _gc_tuned = True
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)


# How long a SIGTERM'd gateway lets live requests finish before ending its streams.
DRAIN_SECONDS = 5.0
WAKE = object()  # in a session's outbox: look for due commands


class Session:
    """One connected agent. Everything it is to be sent goes through `outbox`
    (None ends the stream), so its loop waits on one queue only."""

    def __init__(self, server_id, loop):
        self.server_id = server_id
        self.outbox = asyncio.Queue()
        self.pending = {}  # correlation id -> Future of LiveReply
        self.shells = {}  # shell session id -> its pipe (gateway/shells.py)
        self.in_flight = set()  # command ids sent on this stream, not yet acked
        self.revision = 0  # the agent's protocol revision, from its Hello
        self.woken = False
        self.resync = True  # the first delivery also re-sends acked commands still open
        self.hello = loop.create_future()
        self.reader = None  # the task reading what the agent sends
        self.connecting = None  # future of the connection's start (agents.mark_connected)
        self.release = None  # the task releasing the stream, once it ended
        self.watch = alerts.Watch()  # the fleet alerts' figures, as its heartbeats say
        self.server_id_hex = uuid.UUID(server_id).hex
        # The metric history's: each environment's last disk figures (by id hex),
        # and the environment ids its agent sends, as the history stores them.
        self.disk, self.env_ids = {}, {}
        # Its latest host figures (minute, {name: figure}) and latest heartbeat with
        # environments' figures (minute, Heartbeat), and the minutes last written.
        self.host_beat = self.envs_beat = None
        self.written = (None, None)

    def wake(self):
        if not self.woken:
            self.woken = True
            self.outbox.put_nowait(WAKE)


class Gateway(pb_grpc.AgentGatewayServicer):
    def __init__(self, tls=None, redis_url=None, images=None,
                 handshake_timeout=HANDSHAKE_TIMEOUT, max_connections=MAX_CONNECTIONS,
                 history_every=Config.METRICS_FLUSH_SECONDS):
        self.tls = tls  # (cert_pem, key_pem) or None
        self.options = server_options(handshake_timeout, max_connections)
        # config.images(): what a registration's auto_deploy names (None: no auto_deploy)
        self.images = images
        self.redis_url = redis_url  # set: other processes reach our streams via Redis
        self.relay = None  # answers relayed requests for our streams
        self.remote = None  # reaches streams other gateway processes hold
        if redis_url:  # the relay (and redis, ~7 MB) is loaded only when configured
            from control_plane.gateway.relay import RedisRelay

            self.remote = RedisRelay(redis_url)
        self.sessions = {}
        self.draining = False
        self.seen = set()  # servers that beat since the last flush
        # Metric history sampled from the sessions every `history_every` s (0: off).
        self.history_every = history_every
        self.history = bool(history_every)
        self.ended = []  # sessions ended since the last history write: sampled once more
        self.loop = None
        self.server = None
        self.port = None

    # --- lifecycle -------------------------------------------------------

    async def start(self, address):
        self.loop = asyncio.get_running_loop()
        _tune_gc()
        self.server = grpc.aio.server(options=self.options)
        pb_grpc.add_AgentGatewayServicer_to_server(self, self.server)
        if self.tls:
            creds = grpc.ssl_server_credentials([(self.tls[1], self.tls[0])])
            self.port = self.server.add_secure_port(address, creds)
        else:
            self.port = self.server.add_insecure_port(address)
        await self.server.start()
        AGENTS_CONNECTED.set_function(lambda: len(self.sessions))
        self._flusher = asyncio.create_task(self._flush_seen())
        self._poller = asyncio.create_task(self._poll_commands())
        self._history = (asyncio.create_task(self._flush_history())
                         if self.history else None)
        if self.redis_url:
            from control_plane.gateway.relay import GatewaySubscriber

            self.relay = GatewaySubscriber(self.redis_url, self)
            self._relaying = asyncio.create_task(self.relay.run())
        log.info("gateway listening on port %s", self.port)
        return self.port

    async def _poll_commands(self):
        """One query per interval for all sessions: catches commands queued by
        another process (whose wake-up cannot reach us) or while a wake was lost."""
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                due = await asyncio.to_thread(queue.servers_with_pending)
            except Exception:
                log.exception("polling for commands failed")
                continue
            for server_id in due:
                session = self.sessions.get(server_id)
                if session is not None:
                    AGENT_WAKEUPS.labels(via="poll").inc()
                    session.wake()

    async def _flush_seen(self):
        while True:
            await asyncio.sleep(SEEN_FLUSH_SECONDS)
            batch, self.seen = self.seen, set()
            try:
                await asyncio.to_thread(agents.mark_seen, batch)
            except Exception:
                log.exception("recording heartbeats failed")
                self.seen |= batch

    async def _flush_history(self):
        while True:
            await asyncio.sleep(self.history_every)
            await self.write_history()

    async def write_history(self):
        if self.history:  # switched off and on by a benchmark's rounds
            try:
                await asyncio.to_thread(self._write_history)
            except Exception:  # the next write has its own minutes: these are dropped
                log.exception("recording metric history failed")

    def _write_history(self):
        ended, self.ended = self.ended, []
        rows = messages.history_rows([*self.sessions.values(), *ended])
        if rows:
            history.write(rows)

    async def stop(self, grace=1.0):
        if self.server is not None:
            self._flusher.cancel()
            self._poller.cancel()
            if self._history is not None:
                self._history.cancel()
                await self.write_history()
            if self.relay is not None:
                self._relaying.cancel()
                await self.relay.close()
            await self.server.stop(grace)

    async def drain(self, grace=DRAIN_SECONDS):
        """SIGTERM (scale-out): take no new streams, give the live requests in flight
        up to `grace` seconds, then end every stream. Each agent reconnects at once,
        through the balancer to another gateway, where what it had acknowledged is
        answered from its journal (never run twice) and the rest is delivered."""
        self.draining = True
        deadline = self.loop.time() + grace
        while (any(s.pending for s in self.sessions.values())
               and self.loop.time() < deadline):
            await asyncio.sleep(0.05)
        sessions = list(self.sessions.values())
        for session in sessions:
            session.outbox.put_nowait(None)
        deadline = self.loop.time() + grace
        while self.sessions and self.loop.time() < deadline:  # each stream released
            await asyncio.sleep(0.05)
        log.info("gateway drained: %d agent stream(s) ended", len(sessions))
        await self.stop(grace=1.0)
        return len(sessions)

    def start_in_thread(self, address):
        """Run on a private event loop in a daemon thread (embedded mode)."""
        started = threading.Event()
        failed = []

        async def main():
            self._stopping = asyncio.Event()
            try:
                await self.start(address)
            except Exception as exc:
                failed.append(exc)
                return
            finally:
                started.set()
            # Not server.wait_for_termination(): it blocks the loop's thread in C.
            await self._stopping.wait()
            await self.stop(0)

        self._thread = threading.Thread(target=asyncio.run, args=(main(),),
                                        name="berth-gateway", daemon=True)
        self._thread.start()
        if not started.wait(15) or failed:
            raise RuntimeError(f"the gateway did not start: {failed}")
        return self.port

    def stop_from_thread(self, timeout=15):
        """Stop the embedded gateway and wait until its port is free."""
        if self.loop is not None and self.loop.is_running():
            self.loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout)

    # --- called from HTTP threads ----------------------------------------

    def wake_local(self, server_id):
        """On the loop (the relay's wake-ups): deliver due commands now if the server is
        connected here."""
        session = self.sessions.get(str(server_id))
        if session is not None:
            AGENT_WAKEUPS.labels(via="relay").inc()
            session.wake()

    def wake(self, server_id):
        """New durable commands for a server: deliver now if it is connected here."""
        session = self.sessions.get(str(server_id))
        if session is not None:
            AGENT_WAKEUPS.labels(via="local").inc()
            self.loop.call_soon_threadsafe(session.wake)
        elif self.remote is not None:
            self.remote.wake(server_id)

    def call(self, server_id, request, timeout):
        """Send a LiveRequest and wait for its LiveReply (blocking, thread-safe).
        Raises NotConnected, or TimeoutError after `timeout` seconds."""
        if self.loop is None or str(server_id) not in self.sessions:
            if self.remote is not None:  # perhaps another gateway process holds it
                return self.remote.call(server_id, request, timeout)
            raise NotConnected(str(server_id))
        future = asyncio.run_coroutine_threadsafe(
            self.ask(str(server_id), request, timeout), self.loop)
        return future.result(timeout + 5)

    def shell(self, server_id, opening, on_frame):
        """Open a shell session on a stream (agent_link.AgentLink.shell)."""
        session = self.sessions.get(str(server_id)) if self.loop is not None else None
        if session is None:
            if self.remote is not None:
                return self.remote.shell(server_id, opening, on_frame)
            raise NotConnected(str(server_id))
        return shells.open_local(self, session, opening, on_frame)

    async def ask(self, server_id, request, timeout):
        """On the loop: a live request to a stream held here (`call` and the relay)."""
        session = self.sessions.get(server_id)
        if session is None:
            raise NotConnected(server_id)
        request.correlation_id = uuid.uuid4().hex
        reply = self.loop.create_future()
        session.pending[request.correlation_id] = reply
        await session.outbox.put(pb.ControlMessage(request=request))
        try:
            return await asyncio.wait_for(reply, timeout)
        finally:
            session.pending.pop(request.correlation_id, None)

    # --- RPCs ------------------------------------------------------------

    async def Register(self, request, context):  # noqa: N802 - gRPC method name
        from control_plane.services.servers import registration

        facts = request.facts
        try:
            server, credential = await asyncio.to_thread(
                registration.consume_token, request.token, hostname=facts.hostname,
                cpu_cores=facts.cpu_cores, ram_mb=facts.ram_mb, disk_gb=facts.disk_gb,
                images=self.images)
        except ApiError as exc:
            await context.abort(REGISTER_ERRORS.get(exc.code, grpc.StatusCode.INVALID_ARGUMENT),
                                f"{exc.code}: {exc.message}")
        return pb.RegisterResponse(server_id=str(server.id), credential=credential)

    async def Connect(self, request_iterator, context):  # noqa: N802
        if self.draining:  # the agent retries, and the balancer sends it elsewhere
            await context.abort(grpc.StatusCode.UNAVAILABLE, wire.DRAINING)
        server = await asyncio.to_thread(agents.server_for_credential, _credential(context))
        if server is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "unknown agent credential")
        server_id = str(server.id)
        session = Session(server_id, self.loop)
        session.reader = asyncio.create_task(self._read(session, request_iterator))
        # When a client dies, grpc cancels this stream's task, maybe while the
        # generator is not running its `finally`: the RPC's end releases it too.
        context.add_done_callback(lambda _: self.loop.call_soon_threadsafe(
            self._release, session))
        try:
            hello = await asyncio.wait_for(session.hello, 30)  # the agent speaks first
            session.revision = hello.revision
            previous = self.sessions.get(server_id)
            if previous is not None:  # a reconnect replaces an old stream
                previous.outbox.put_nowait(None)
            self.sessions[server_id] = session
            if self.relay is not None:
                await self.relay.hold(server_id)
            # Shielded: the release awaits the same future, even after a cancel here.
            session.connecting = asyncio.ensure_future(
                asyncio.to_thread(agents.mark_connected, server_id, hello.facts))
            await asyncio.shield(session.connecting)
            yield pb.ControlMessage(welcome=pb.Welcome(
                server_id=server_id, heartbeat_seconds=agents.HEARTBEAT_SECONDS,
                revision=wire.REVISION))
            session.wake()  # whatever was queued while the agent was away
            while True:
                message = await session.outbox.get()
                if message is None:
                    return
                if message is WAKE:
                    session.woken = False
                    for command in await asyncio.to_thread(messages.due_commands, session):
                        yield command
                    continue
                yield message
        except (TimeoutError, asyncio.CancelledError):
            return
        finally:
            await asyncio.shield(self._release(session))

    def _release(self, session):
        """The stream's release, started once as its own task: the cancel that grpc
        sends when the client is gone must not stop it half way (the clearing of
        the connected mark was lost that way)."""
        if session.release is None:
            session.release = self.loop.create_task(self._released(session))
        return session.release

    async def _released(self, session):
        """Forget the stream, fail its pending live requests and, if it marked
        the server connected, clear that mark."""
        session.reader.cancel()
        if self.history:
            self.ended.append(session)
        server_id = session.server_id
        if self.sessions.get(server_id) is session:  # not replaced by a newer stream
            del self.sessions[server_id]
            if self.relay is not None:
                await self.relay.release(server_id)
        for reply in session.pending.values():
            if not reply.done():
                reply.set_exception(NotConnected(server_id))
        shells.lost(session)
        if session.connecting is not None:
            try:
                since = await session.connecting
            except Exception:  # the mark was never written
                return
            await asyncio.to_thread(agents.mark_disconnected, server_id, since)

    async def _read(self, session, request_iterator):
        """Everything the agent sends; the Hello is handed to Connect via the outbox."""
        try:
            async for message in request_iterator:
                try:
                    await self._handle(session, message)
                except Exception:
                    # One message that could not be recorded must not drop the stream;
                    # an unrecorded result is asked for again on the next stream.
                    log.exception("handling a %s from server %s failed",
                                  message.WhichOneof("body"), session.server_id)
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        finally:
            if not session.hello.done():
                session.hello.cancel()
            session.outbox.put_nowait(None)

    async def _handle(self, session, message):
        kind = message.WhichOneof("body")
        handler = messages.HANDLERS.get(kind)
        if handler is not None:
            await handler(self, session, getattr(message, kind))


def _credential(context):
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and value.startswith("Bearer "):
            return value[len("Bearer "):]
    return None
