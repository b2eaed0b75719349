"""What a kind of task is, and the registry of kinds.

Each domain registers the kinds it owns, once, when its package is imported
(control_plane/services/__init__.py imports them all): services/deploys/kinds.py
the deploy kinds, services/backups/kinds.py backup, restore and export. A kind
names its agent command, and hooks for what is its own: the command's payload
(and rows it keeps, such as a backup's), what the agent's acknowledgement and
result mean for them, and its events. What a kind
does to its environment's status is control_plane/vocabulary/lifecycle.py's. The engine
(engine.py) calls the hooks and never asks which kind a task is.

The names are protocol.kinds.TaskKind; a name with no registered kind is a
programming error (LookupError), never a user's."""

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from control_plane.vocabulary import states
from protocol.kinds import CommandKind, TaskKind

D = states.DeploymentStatus
TIME_LIMIT = dt.timedelta(minutes=30)  # what most tasks get (the reaper's cut-off)


def _given(env, settings, record):
    return {}


def _nothing(*args):
    return None


def _no_fields(task, result):
    return {}


@dataclass(frozen=True)
class Kind:
    name: TaskKind
    command: CommandKind
    # (task, env, settings, **params) -> the command's payload, inside the start's
    # transaction; it may write the kind's own rows (a backup's).
    payload: Callable
    # (env, settings, given) -> the task row's fields the caller did not give
    # (a deploy's image and configuration).
    defaults: Callable = _given
    succeeded: str = D.SUCCESS  # the task's status once it succeeded
    failure: str = "the task failed"  # the error message when the agent gave none
    # A deployment: the environment's `last_deploy`, retried by its kind, counted
    # in its versions. Backups, restores and exports are not.
    is_deployment: bool = True
    deploys_code: bool = False  # it puts code on the server (a rollback's target)
    # (payload) -> how long it may run before the reaper fails it.
    time_limit: Callable = lambda payload: TIME_LIMIT
    task_fields: Callable = _no_fields  # (task, result) -> task fields on success
    # (task, result) -> task fields kept from any result, a failure's partial one too
    result_fields: Callable = _no_fields
    on_success: Callable | None = None  # (env, result, org_id, now): the environment's effects
    started: Callable = _nothing  # (task, org_id, now): the agent has the command
    refused: Callable = _nothing  # (task, result) -> why a success is a failure, or None
    settled: Callable = _nothing  # (task, outcome, org_id, now, env_status): it ended


_KINDS: dict[str, Kind] = {}
# (task, outcome, org_id, now): told of every task that ended, after its kind's
# hooks, in the same transaction (automation rules follow their actions there).
_WATCHERS: list[Callable] = []


def watch(callback):
    if callback not in _WATCHERS:
        _WATCHERS.append(callback)
    return callback


def watchers():
    return tuple(_WATCHERS)


def register(kind):
    if kind.name in _KINDS:
        raise ValueError(f"task kind {kind.name!r} registered twice")
    _KINDS[kind.name] = kind
    return kind


def get(name):
    try:
        return _KINDS[name]
    except KeyError:
        raise LookupError(f"no task kind {name!r} is registered") from None


def names(**flags):
    """The registered kinds whose attributes have these values, e.g.
    names(is_deployment=False)."""
    return tuple(name for name, kind in _KINDS.items()
                 if all(getattr(kind, flag) == value for flag, value in flags.items()))


def registered():
    return dict(_KINDS)
