"""Live requests and wake-ups between processes, over Redis (scale-out mode).

A gateway subscribes to `berth:live:<server>` and `berth:wake:<server>` for
each stream it holds. A web process publishes a live request there (nobody
subscribed means the server is not connected anywhere) and waits for the
reply on the list `berth:reply:<correlation id>`. Durable commands never
travel this way: they are rows in the database; a wake-up only hurries them.

With Redis away, nothing here fails a caller: a wake-up is dropped (the gateways'
database poll delivers the command within seconds), a live request for a stream held
by another process answers as not connected, and a gateway keeps its streams and
subscribes them again once Redis is back."""

import asyncio
import contextlib
import logging
import uuid

import redis
import redis.asyncio as aioredis

from control_plane.agent_link import NotConnected
from control_plane.gateway import shells
from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.relay")
REPLY_TTL = 60


class RedisRelay:
    """The web side: an `agent_link.AgentLink`, as the embedded Gateway is."""

    def __init__(self, url):
        self.redis = redis.Redis.from_url(url)

    def call(self, server_id, request, timeout):
        request.correlation_id = uuid.uuid4().hex
        reply_key = f"berth:reply:{request.correlation_id}"
        try:
            if not self.redis.publish(f"berth:live:{server_id}", request.SerializeToString()):
                raise NotConnected(str(server_id))  # no gateway holds its stream
            got = self.redis.blpop([reply_key], timeout=max(1, round(timeout)))
        except redis.RedisError as exc:
            log.warning("live request for %s not relayed: %s", server_id, exc)
            raise NotConnected(str(server_id)) from None
        if got is None:
            raise TimeoutError(str(server_id))
        reply = pb.LiveReply()
        reply.ParseFromString(got[1])
        return reply

    def shell(self, server_id, opening, on_frame):
        """A shell session on a stream another process holds: its output comes on
        `berth:shell-out:<session>` (subscribed before the opening is published), its
        input goes on `berth:shell-in:<session>`."""
        out = f"berth:shell-out:{opening.session_id}"
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        pipe = RelayedShell(self.redis, opening.session_id, pubsub)

        def received(message):
            frame = pb.ShellFrame.FromString(message["data"])
            if frame.exited or frame.error_code:
                pipe.stop()
            on_frame(frame)
        try:
            pubsub.subscribe(**{out: received})
            pipe.thread = pubsub.run_in_thread(sleep_time=1.0, daemon=True)
            if not self.redis.publish(f"berth:shell:{server_id}", opening.SerializeToString()):
                raise NotConnected(str(server_id))
        except (redis.RedisError, NotConnected) as exc:
            pipe.stop()
            log.info("shell session for %s not relayed: %s", server_id, exc)
            raise NotConnected(str(server_id)) from None
        return pipe

    def wake(self, server_id):
        try:
            self.redis.publish(f"berth:wake:{server_id}", b"")
        except redis.RedisError as exc:  # the gateways' poll delivers it instead
            log.warning("wake-up for %s not relayed: %s", server_id, exc)


class RelayedShell:
    """The web side's pipe of a relayed shell session."""

    def __init__(self, client, session_id, pubsub):
        self.redis, self.channel, self.pubsub = client, f"berth:shell-in:{session_id}", pubsub
        self.thread = None

    def send(self, frame):
        try:
            self.redis.publish(self.channel, frame.SerializeToString())
        except redis.RedisError as exc:  # the idle limit ends the session
            log.warning("shell input not relayed: %s", exc)
        if frame.close:
            self.stop()

    def stop(self):
        if self.thread is not None:
            self.thread.stop()  # (from its own thread too: it ends after this message)
        else:
            with contextlib.suppress(Exception):
                self.pubsub.close()


class GatewaySubscriber:
    """The gateway side: answers relayed requests for the streams it holds. `gateway`
    is the Gateway (`wake_local` and `ask`, called on its loop); this module does
    not import it."""

    def __init__(self, url, gateway):
        self.url, self.gateway = url, gateway
        self.redis = aioredis.Redis.from_url(url)
        self.pubsub = None
        self.held = set()  # server ids whose streams this gateway holds
        self.shells = {}  # relayed shell session id -> its local pipe

    @staticmethod
    def _channels(server_id):
        return f"berth:live:{server_id}", f"berth:wake:{server_id}", f"berth:shell:{server_id}"

    async def hold(self, server_id):
        self.held.add(server_id)
        await self._subscription("subscribe", server_id)

    async def release(self, server_id):
        self.held.discard(server_id)
        await self._subscription("unsubscribe", server_id)

    async def _subscription(self, action, server_id):
        """Never fails the stream: without Redis, `run` subscribes what is held
        once it is back."""
        if self.pubsub is None:
            return
        try:
            await getattr(self.pubsub, action)(*self._channels(server_id))
        except (redis.RedisError, OSError) as exc:
            log.warning("relay %s for %s failed: %s", action, server_id, exc)

    async def run(self):
        """Listen, and after any loss of Redis, connect and subscribe again (waiting
        up to 10 s between tries)."""
        delay = 0.5
        while True:
            try:
                self.pubsub = self.redis.pubsub()
                channels = [c for server_id in list(self.held) for c in self._channels(server_id)]
                channels += [f"berth:shell-in:{sid}" for sid in list(self.shells)]
                await self.pubsub.subscribe("berth:gateway", *channels)
                delay = 0.5
                await self._listen()
            except (redis.RedisError, OSError) as exc:
                log.warning("relay subscription lost (%s); retrying in %.1f s", exc, delay)
            pubsub, self.pubsub = self.pubsub, None
            with contextlib.suppress(Exception):
                await pubsub.aclose()
            await asyncio.sleep(delay)
            delay = min(10.0, delay * 2)

    async def _listen(self):
        async for message in self.pubsub.listen():
            if message["type"] != "message":
                continue
            channel = message["channel"].decode()
            _, kind, server_id = channel.split(":", 2) if channel.count(":") == 2 else (0, "", "")
            if kind == "wake":
                self.gateway.wake_local(server_id)
            elif kind == "live":
                asyncio.create_task(self._answer(server_id, message["data"]))
            elif kind == "shell":
                await self._open_shell(server_id, message["data"])
            elif kind == "shell-in":
                self._shell_input(server_id, message["data"])  # (the id is the session's)

    def _shell_input(self, sid, data):
        held = self.shells.get(sid)
        if held is None:
            return
        pipe, frames = held
        frame = pb.ShellFrame.FromString(data)
        pipe.send(frame)
        if frame.close:  # the agent sends nothing more: the publisher ends now
            frames.put_nowait(pb.ShellFrame(session_id=sid, error_code="closed"))

    async def _open_shell(self, server_id, data):
        """A shell session a web process asks for on a stream held here: its frames
        published in order by one task, its input subscribed to."""
        from control_plane.agent_link import NotConnected, ShellUnsupported

        opening = pb.ShellOpen.FromString(data)
        sid, frames = opening.session_id, asyncio.Queue()
        out, inbound = f"berth:shell-out:{sid}", f"berth:shell-in:{sid}"

        async def publish():
            while True:
                frame = await frames.get()
                try:
                    await self.redis.publish(out, frame.SerializeToString())
                except (redis.RedisError, OSError) as exc:
                    log.warning("shell output not relayed: %s", exc)
                if frame.exited or frame.error_code:
                    self.shells.pop(sid, None)
                    await self._unsubscribe(inbound)
                    return
        asyncio.create_task(publish())
        try:
            if self.pubsub is not None:
                await self.pubsub.subscribe(inbound)
            session = self.gateway.sessions.get(server_id)
            if session is None:  # released meanwhile: never relayed again from here
                raise NotConnected(server_id)
            pipe = shells.open_local(self.gateway, session, opening, frames.put_nowait)
            self.shells[sid] = (pipe, frames)
        except (NotConnected, ShellUnsupported, redis.RedisError, OSError) as exc:
            code = shells.UNSUPPORTED if isinstance(exc, ShellUnsupported) else "unavailable"
            frames.put_nowait(pb.ShellFrame(session_id=sid, error_code=code,
                                            error_message=shells.LOST))

    async def _unsubscribe(self, channel):
        if self.pubsub is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                await self.pubsub.unsubscribe(channel)

    async def _answer(self, server_id, data):
        request = pb.LiveRequest()
        request.ParseFromString(data)
        correlation = request.correlation_id
        try:
            reply = await self.gateway.ask(server_id, request, 25)
        except Exception as exc:  # not held any more, timed out: the caller times out too
            log.info("relayed request for %s not answered: %s", server_id, exc)
            return
        reply.correlation_id = correlation
        key = f"berth:reply:{correlation}"
        try:
            await self.redis.rpush(key, reply.SerializeToString())
            await self.redis.expire(key, REPLY_TTL)
        except (redis.RedisError, OSError) as exc:  # the caller times out
            log.warning("reply for %s not relayed: %s", server_id, exc)

    async def close(self):
        if self.pubsub is not None:
            with contextlib.suppress(Exception):
                await self.pubsub.aclose()
        await self.redis.aclose()
