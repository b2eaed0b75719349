"""The live requests the agent answers, by kind: kind -> handler(agent, body),
which returns the reply's body. A request's kind (LiveRequest's `kind` oneof)
and its answer (LiveReply's `body` oneof) have the same name. The control
plane's live reads send these kinds; a kind not here answers `unavailable` (the
agent may be older than the control plane).

The daemon (`Agent._answer`) looks the handler up and puts its failures in the
reply: an agent error's `code` (agent.errors) as `error_code`, anything else as
`unavailable`. The modules that do the work load when first asked for: the
samplers through the daemon (`Agent.host_sampler()`, `container_sampler()`),
runtime logs here."""

import logging

from protocol.errors import AgentErrorCode
from protocol.v1 import agent_pb2 as pb

log = logging.getLogger("berth.agent")
HANDLERS = {}


def reply_to(agent, request):
    """The LiveReply to a LiveRequest, from its handler in the table below: an agent
    error's `code` as `error_code`, anything else as `unavailable`."""
    from agent.errors import AgentError

    reply = pb.LiveReply(correlation_id=request.correlation_id)
    kind = request.WhichOneof("kind")
    handler = HANDLERS.get(kind)
    try:
        if handler is None:
            reply.error_code = AgentErrorCode.UNAVAILABLE
            reply.error_message = f"unknown request {kind}"
        else:
            getattr(reply, kind).CopyFrom(handler(agent, getattr(request, kind)))
    except AgentError as exc:
        reply.error_code, reply.error_message = exc.code, str(exc)
    except Exception as exc:
        log.exception("live request failed")
        reply.error_code, reply.error_message = AgentErrorCode.UNAVAILABLE, str(exc)
    return reply


def answers(kind):
    def register(handler):
        if HANDLERS.get(kind, handler) is not handler:
            raise ValueError(f"two handlers for the live request kind {kind!r}")
        HANDLERS[kind] = handler
        return handler
    return register


@answers("host_metrics")
def host_metrics(agent, body):
    return pb.HostMetrics(**agent.host_sampler().sample())


@answers("container_metrics")
def container_metrics(agent, body):
    metrics = pb.ContainerMetrics()
    if agent.over_ssh:  # the spec: over SSH, each container's state and no figures
        for role, state in agent.container_sampler().states(body.environment_id).items():
            if state is not None:
                getattr(metrics, role).CopyFrom(pb.ContainerStats(status=state["status"]))
        return metrics
    found = agent.container_sampler().for_environment(body.environment_id)
    for role in ("erp", "postgres"):
        # A monitoring agent reports only running containers (spec).
        if found.get(role) is not None and found[role]["status"] == "running":
            getattr(metrics, role).CopyFrom(pb.ContainerStats(
                **{k: v for k, v in found[role].items() if v is not None}))
    return metrics


@answers("runtime_logs")
def runtime_logs(agent, body):
    from agent.deploy.runtime_logs import runtime_logs

    return pb.RuntimeLogs(**runtime_logs(agent.docker(), body.environment_id, body.source,
                                         body.lines))


@answers("mails")
def mails(agent, body):
    """The mails an environment's ERP sent to the catcher: the newest `limit`, or
    one. Read from disk: a read starts no SMTP server."""
    import json

    from agent.errors import AgentError, NoMailCatcher
    from agent.mail.store import MailStore

    if agent.over_ssh:
        raise NoMailCatcher()
    store = MailStore(agent.data_dir / "mails")
    try:
        if body.mail_id:
            found = {"mail": store.read(body.environment_id, body.mail_id)}
        else:
            found = {"mails": store.list(body.environment_id, body.limit or 50)}
    except (OSError, ValueError) as exc:
        raise AgentError(f"the caught mails could not be read: {exc}") from exc
    return pb.Mails(mails_json=json.dumps(found, ensure_ascii=False))
