"""`berth-agent register`: trade a single-use srt_live_ token for the agent's
own credential. The token is read from a file or stdin, never from argv."""

import json
import urllib.request

import grpc

from agent.config import AgentConfig
from agent.facts import host_facts
from protocol import wire
from protocol.v1 import agent_pb2 as pb
from protocol.v1 import agent_pb2_grpc as pb_grpc


class RegistrationError(Exception):
    pass


def discover(control_plane):
    """The control plane says where agents dial its gateway."""
    url = control_plane.rstrip("/") + "/agent/bootstrap.json"
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            return json.load(response)
    except (OSError, ValueError) as exc:
        raise RegistrationError(f"cannot reach the control plane at {url}: {exc}") from None


def channel(address, tls):
    if tls:
        return grpc.secure_channel(address, grpc.ssl_channel_credentials())
    return grpc.insecure_channel(address)


def register(control_plane, token):
    token = token.strip()
    if not token.startswith("srt_live_"):
        raise RegistrationError("that is not a registration token (srt_live_…)")
    info = discover(control_plane)
    revision = info.get("revision") if isinstance(info.get("revision"), int) else 0
    if revision < wire.REVISION:  # the token stays unused: nothing was sent yet
        raise RegistrationError(f"the control plane at {control_plane} speaks protocol revision "
                                f"{revision}, older than this agent's {wire.REVISION}: upgrade "
                                "the control plane, or install the agent it serves (its "
                                "install command)")
    with channel(info["grpc_address"], info.get("grpc_tls", False)) as ch:
        try:
            reply = pb_grpc.AgentGatewayStub(ch).Register(
                pb.RegisterRequest(token=token, facts=host_facts()), timeout=30)
        except grpc.RpcError as exc:
            raise RegistrationError(f"registration refused: {exc.details()}") from None
    config = AgentConfig(control_plane=control_plane.rstrip("/"),
                         grpc_address=info["grpc_address"], server_id=reply.server_id,
                         credential=reply.credential, grpc_tls=info.get("grpc_tls", False))
    config.save()
    return config
