"""The durable commands the agent runs, by kind: kind -> handler(agent, payload,
log). The control plane's command queue sends these kinds; a kind not here
fails the command (the agent may be older than the control plane)."""

from agent import __version__

HANDLERS = {}


def handles(kind):
    def register(handler):
        HANDLERS[kind] = handler
        return handler
    return register


def run(agent, kind, payload, log):
    handler = HANDLERS.get(kind)
    if handler is None:
        raise ValueError(f"unknown command kind {kind!r}")
    return handler(agent, payload, log)


def _environments(agent):
    from agent.environments import Environments  # loads the engine client only when needed

    return Environments(agent.docker())


@handles("ping")
def ping(agent, payload, log):
    log("info", f"pong from berth-agent {__version__}")
    return {"pong": True, "agent_version": __version__}


@handles("deploy")
def deploy(agent, payload, log):
    return _environments(agent).deploy(payload, log)


@handles("start")
def start(agent, payload, log):
    return _environments(agent).start(payload["environment_id"], log)


@handles("stop")
def stop(agent, payload, log):
    return _environments(agent).stop(payload["environment_id"], log)


@handles("restart")
def restart(agent, payload, log):
    return _environments(agent).restart(payload["environment_id"], log)


@handles("destroy")
def destroy(agent, payload, log):
    return _environments(agent).destroy(payload["environment_id"],
                                        payload.get("delete_data", False), log)
