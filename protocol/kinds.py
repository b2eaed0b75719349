"""The kinds of work, named once for both sides of the wire.

`CommandKind` is what crosses it: a durable command the control plane queues
(control_plane/services/tasks/queue.py) and an agent runs (a handler registered
with `agent.commands.handles`). An agent older than the control plane fails a
kind it does not know, saying so.

`TaskKind` is what the control plane records as a task (a Deployment row's
`kind`), each carried out by one command: the domain that owns the kind
registers it, with its command and hooks (control_plane/services/tasks/kinds.py)."""

from enum import StrEnum


class CommandKind(StrEnum):
    PING = "ping"
    DEPLOY = "deploy"  # also a redeploy: a new ERP container, data kept
    START = "start"
    STOP = "stop"
    RESTART = "restart"
    DESTROY = "destroy"  # also a deletion
    ROUTES = "routes"  # an environment's host names changed (no task)
    BACKUP = "backup"
    RESTORE = "restore"
    EXPORT = "export"  # a completed backup written as Odoo's backup zip
    DRILL = "drill"  # a backup restored into a throwaway copy, checked, then removed
    UPGRADE = "upgrade"  # the agent installs the control plane's version and restarts into it
    TEST = "test"  # a build: the changed modules' tests run in a deployed environment


# Kinds whose success changes what an environment holds on disk: its use is measured
# again at once, not at the next interval (the agent's meter, the SSH checks).
DISK_CHANGING = (CommandKind.DEPLOY, CommandKind.RESTORE)


class TaskKind(StrEnum):
    DEPLOY = "deploy"
    REDEPLOY = "redeploy"
    RESTART = "restart"
    START = "start"
    STOP = "stop"
    DELETE = "delete"  # the public API's: the environment is gone for good
    DESTROY = "destroy"  # /api/v1's: the environment may be deployed again
    BACKUP = "backup"
    RESTORE = "restore"
    EXPORT = "export"
    DRILL = "drill"
    TEST = "test"  # a build's test run (services/automation/builds.py)


class Phase(StrEnum):
    """A phase of a command's work that the agent reports (`TaskPhase`)."""
    DEPLOY = "deploy"  # a deploy's pre-deploy backup is done: the deploy itself begins
