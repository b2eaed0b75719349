"""The gateway's table of agent messages: a handler for each kind the protocol
defines, and a kind it has no handler for (from a newer agent) changes nothing."""

import asyncio

from control_plane.gateway import messages
from control_plane.gateway.server import Gateway, Session
from protocol.v1 import agent_pb2 as pb


def test_every_kind_of_agent_message_has_its_handler():
    kinds = {f.name for f in pb.AgentMessage.DESCRIPTOR.oneofs_by_name["body"].fields}
    assert set(messages.HANDLERS) == kinds


def test_a_message_with_no_handler_is_ignored(monkeypatch, world):
    server_id = str(world.server(world.org()).id)  # a heartbeat's figures are followed

    async def run():
        gateway = Gateway()
        session = Session(server_id, asyncio.get_running_loop())
        monkeypatch.delitem(messages.HANDLERS, "heartbeat")
        await gateway._handle(session, pb.AgentMessage(heartbeat=pb.Heartbeat()))
        assert gateway.seen == set()
        monkeypatch.undo()
        await gateway._handle(session, pb.AgentMessage(heartbeat=pb.Heartbeat()))
        assert gateway.seen == {server_id}  # the same message, handled when its handler is there
    asyncio.run(run())
