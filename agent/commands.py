"""The durable commands the agent runs, by kind: kind -> handler(agent, payload,
log). The control plane's command queue sends these kinds; a kind not here
fails the command (the agent may be older than the control plane).

The handlers live with what they do: `agent.deploy.commands` (deploy, start,
stop, restart, destroy, routes) and `agent.backups.commands` (backup, restore,
export), `agent.upgrade` (upgrade); `ping` is here. Each registers itself with `@handles(kind)` when its
module is imported, and the modules are named in HANDLER_MODULES and imported
when a command first needs one: an idle agent loads none of them, and this
registry imports none of them (they import it)."""

import importlib

from agent import __version__
from protocol.kinds import CommandKind

HANDLERS = {}
HANDLER_MODULES = ("agent.deploy.commands", "agent.deploy.module_tests", "agent.backups.commands",
                   "agent.upgrade")


def handles(kind):
    def register(handler):
        if HANDLERS.get(kind, handler) is not handler:
            raise ValueError(f"two handlers for the command kind {kind!r}")
        HANDLERS[kind] = handler
        return handler
    return register


def load():
    """Every handler module imported; returns HANDLERS, then complete."""
    for name in HANDLER_MODULES:
        importlib.import_module(name)
    return HANDLERS


def run(agent, kind, payload, log, **options):
    """The handler of `kind`; `options` are what one handler passes to another
    (the deploy's pre-deploy backup is the backup command with its own label)."""
    handler = HANDLERS.get(kind) or load().get(kind)
    if handler is None:
        raise ValueError(f"unknown command kind {kind!r}")
    return handler(agent, payload, log, **options)


def enter_phase(log, phase):
    """Tell the control plane that the command's work entered `phase`
    (protocol.kinds.Phase), through the command's `log` when it can carry it."""
    report = getattr(log, "phase", None)
    if report is not None:
        report(phase)


@handles(CommandKind.PING)
def ping(agent, payload, log):
    log("info", f"pong from berth-agent {__version__}")
    return {"pong": True, "agent_version": __version__}
