"""The mail catcher's mails: what a non-production environment's ERP sent, kept by
its server's agent and never sent on (agent/mail/), read live through the agent
link. Production sends its mail out: it has none."""

import datetime as dt

from limits import RateLimitItemPerMinute

from control_plane import agent_link
from control_plane.services.environment_settings import access
from control_plane.services.servers.monitoring import ask, ready
from control_plane.vocabulary import errors
from protocol.errors import AgentErrorCode

PER_ENVIRONMENT = RateLimitItemPerMinute(30)
TIMEOUT = 10
PRODUCTION = "production"


def _read(actor, environment_id, berth, limit=0, mail_id=None):
    """Asked of the server's agent: the catcher keeps mails whatever the ERP's state
    (a deploy, a stop), so only an environment with no server cannot answer."""
    env = access.environment(actor, environment_id)
    if env.environment_type == PRODUCTION:
        raise errors.NoMailCatcher("A production environment sends its mail out: none is "
                                   "caught.")
    ready(actor, environment_id, berth, PER_ENVIRONMENT, "mails:environment", running=False,
          env=env)
    unreachable = errors.ServerUnreachable("The server's agent could not be reached.")
    reply = ask(berth, agent_link.mails, env.server_id, env.id, limit, mail_id, TIMEOUT,
                 unreachable=unreachable)
    if reply.error_code in (AgentErrorCode.NO_MAIL_CATCHER, AgentErrorCode.UNAVAILABLE):
        # UNAVAILABLE: an agent of an earlier release, which knows no such request.
        raise errors.NoMailCatcher("This server has no mail catcher: a server reached over "
                                   "SSH has none, and an older agent must be upgraded.")
    if reply.error_code:
        raise errors.ServerUnreachable("The server's agent could not read its caught mails.")
    return env, reply.data


def _shaped(mail):
    at = dt.datetime.fromtimestamp(mail.pop("received_at_unix_ms") / 1000, dt.UTC)
    return {**mail, "received_at": at.replace(tzinfo=None)}


def list_mails(actor, environment_id, berth, limit=50):
    """The newest `limit` mails, newest first."""
    env, data = _read(actor, environment_id, berth, limit=limit)
    return {"environment_id": env.id, "mails": [_shaped(m) for m in data.get("mails") or []]}


def get_mail(actor, environment_id, mail_id, berth):
    """One mail: its headers, text and HTML parts, attachments' names and sizes."""
    env, data = _read(actor, environment_id, berth, mail_id=mail_id)
    if not data.get("mail"):
        raise errors.NotFound("Mail not found (the catcher keeps the newest 500, for 7 days).")
    mail = _shaped(data["mail"])
    mail["headers"] = [{"name": k, "value": v} for k, v in mail["headers"]]
    return {"environment_id": env.id, **mail}
