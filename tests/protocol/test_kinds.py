"""Every kind is defined once (protocol.kinds) and known on both sides of the wire:
each task kind registered by its domain with a command the agent runs, and every
command kind handled by the agent."""

import pytest

from agent import commands
from control_plane.services.tasks import kinds
from protocol.kinds import CommandKind, TaskKind


def test_every_task_kind_is_registered_with_a_command_kind():
    registered = kinds.registered()
    assert set(registered) == set(TaskKind)
    for name, kind in registered.items():
        assert kind.name == name and kind.command in set(CommandKind), name


def test_the_agent_handles_every_command_kind():
    assert set(commands.load()) == set(CommandKind)


def test_registering_a_kind_twice_is_refused():
    with pytest.raises(ValueError, match="twice"):
        kinds.register(kinds.get(TaskKind.DEPLOY))
    with pytest.raises(LookupError):
        kinds.get("nonexistent")
