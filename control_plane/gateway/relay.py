"""Live requests and wake-ups between processes, over Redis (scale-out mode).

A gateway subscribes to `berth:live:<server>` and `berth:wake:<server>` for
each stream it holds. A web process publishes a live request there (nobody
subscribed means the server is not connected anywhere) and waits for the
reply on the list `berth:reply:<correlation id>`. Durable commands never
travel this way: they are rows in the database; a wake-up only hurries them."""

import asyncio
import logging
import uuid

import redis
import redis.asyncio as aioredis

from agent.rpc.v1 import agent_pb2 as pb
from control_plane.agent_link import NotConnected

log = logging.getLogger("berth.relay")
REPLY_TTL = 60


class RedisRelay:
    """The web side: an `agent_link.AgentLink`, as the embedded Gateway is."""

    def __init__(self, url):
        self.redis = redis.Redis.from_url(url)

    def call(self, server_id, request, timeout):
        request.correlation_id = uuid.uuid4().hex
        reply_key = f"berth:reply:{request.correlation_id}"
        if not self.redis.publish(f"berth:live:{server_id}", request.SerializeToString()):
            raise NotConnected(str(server_id))  # no gateway holds its stream
        got = self.redis.blpop([reply_key], timeout=max(1, round(timeout)))
        if got is None:
            raise TimeoutError(str(server_id))
        reply = pb.LiveReply()
        reply.ParseFromString(got[1])
        return reply

    def wake(self, server_id):
        self.redis.publish(f"berth:wake:{server_id}", b"")


class GatewaySubscriber:
    """The gateway side: answers relayed requests for the streams it holds. `gateway`
    is the Gateway (`wake_local` and `ask`, called on its loop); this module does
    not import it."""

    def __init__(self, url, gateway):
        self.url, self.gateway = url, gateway
        self.redis = aioredis.Redis.from_url(url)
        self.pubsub = self.redis.pubsub()

    async def hold(self, server_id):
        await self.pubsub.subscribe(f"berth:live:{server_id}", f"berth:wake:{server_id}")

    async def release(self, server_id):
        await self.pubsub.unsubscribe(f"berth:live:{server_id}", f"berth:wake:{server_id}")

    async def run(self):
        await self.pubsub.subscribe("berth:gateway")  # keeps the connection subscribed
        async for message in self.pubsub.listen():
            if message["type"] != "message":
                continue
            channel = message["channel"].decode()
            _, kind, server_id = channel.split(":", 2) if channel.count(":") == 2 else (0, "", "")
            if kind == "wake":
                self.gateway.wake_local(server_id)
            elif kind == "live":
                asyncio.create_task(self._answer(server_id, message["data"]))

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
        await self.redis.rpush(key, reply.SerializeToString())
        await self.redis.expire(key, REPLY_TTL)

    async def close(self):
        await self.pubsub.aclose()
        await self.redis.aclose()
