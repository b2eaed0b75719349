"""How structured payloads cross the wire, both ways, in one place: a command's
payload, and a proxy's report.

Both sides work with plain dicts; on the wire they are typed messages where the
shape is fixed (`EnvironmentCommand`, `ProxyState`) and a JSON object where it
is not. Which one depends on the other side's revision: agents installed before
revisions (revision 0) read every payload as JSON and report their proxy as
JSON, and keep doing so against any later gateway.

REVISION 2: typed environment commands and proxy reports; each side says its
revision in Hello and Welcome. REVISION 3 (this one): shell sessions (ShellOpen,
ShellFrame), offered only to agents of at least SHELLS; a ShellOpen's
`stream_url` and `stream_ticket` (the session's bytes on a socket of their own) need
no revision: an agent that skips them keeps to ShellFrames on its stream. An agent of
this revision needs a gateway of at least REVISION (`gateway_too_old`)."""

import json

from protocol.kinds import CommandKind
from protocol.v1 import agent_pb2 as pb

REVISION = 3
SHELLS = 3  # the first revision whose agents open shell sessions
# What a draining gateway answers a new stream (UNAVAILABLE): the agent tries again
# at once, not after a longer backoff, and the balancer sends it to another gateway.
DRAINING = "this gateway is shutting down"
# The kinds whose payload is an EnvironmentCommand (from revision 2).
ENVIRONMENT_KINDS = frozenset({CommandKind.START, CommandKind.STOP, CommandKind.RESTART,
                               CommandKind.DESTROY, CommandKind.ROUTES})
_PROXY = ("image", "acme_directory", "acme_email", "acme_roots_pem")


def gateway_too_old(welcome):
    """Why this agent cannot work with the gateway that welcomed it, or None."""
    if welcome.revision >= REVISION:
        return None
    return (f"the control plane speaks protocol revision {welcome.revision}, older than this "
            f"agent's {REVISION}: upgrade the control plane, or install the agent it serves "
            "(its install command)")


# --- commands ---------------------------------------------------------------------

def command(command_id, kind, payload, revision):
    """The Command message for an agent of `revision`."""
    message = pb.Command(id=command_id, kind=kind)
    if revision >= 2 and kind in ENVIRONMENT_KINDS:
        proxy = payload.get("proxy")
        message.environment.CopyFrom(pb.EnvironmentCommand(
            environment_id=payload.get("environment_id") or "",
            proxy=pb.ProxySettings(**{k: proxy.get(k) or "" for k in _PROXY}) if proxy else None,
            hostnames=payload.get("hostnames") or [],
            delete_data=bool(payload.get("delete_data"))))
    else:
        message.payload_json = json.dumps(payload)
    return message


def payload(message):
    """A Command's payload as the agent's handlers read it."""
    if message.HasField("environment"):
        env = message.environment
        out = {"environment_id": env.environment_id, "delete_data": env.delete_data,
               "hostnames": list(env.hostnames), "proxy": None}
        if env.HasField("proxy"):
            out["proxy"] = {k: getattr(env.proxy, k) or None for k in _PROXY}
        return out
    return json.loads(message.payload_json or "{}")


# --- the proxy's report -------------------------------------------------------------

def proxy_report(report):
    """The agent's report ({running, reason, certificates: {name: {state,
    valid_until, reason}}}) as a ProxyReport."""
    return pb.ProxyReport(state=pb.ProxyState(
        running=bool(report.get("running")), reason=report.get("reason") or "",
        certificates={name: pb.Certificate(state=c.get("state") or "",
                                           valid_until=c.get("valid_until") or "",
                                           reason=c.get("reason") or "")
                      for name, c in (report.get("certificates") or {}).items()}))


def proxy_state(message):
    """A ProxyReport as a dict of the same shape, from either revision (JSON from
    agents before revision 2); ValueError when it is neither."""
    if not message.HasField("state"):
        state = json.loads(message.state_json)
        if not isinstance(state, dict):
            raise ValueError("a proxy report is a JSON object")
        return state
    s = message.state
    return {"running": s.running, "reason": s.reason or None,
            "certificates": {name: {"state": c.state, "valid_until": c.valid_until or None,
                                    "reason": c.reason or None}
                             for name, c in s.certificates.items()}}
