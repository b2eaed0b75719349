"""The lifecycle's own guarantees: the gateway is woken only once the task's
command is committed (never after a rollback), and the command queue imports
nothing above it."""

import subprocess
import sys

import pytest

from control_plane.db import database
from control_plane.models import AgentCommand
from control_plane.services.deploys import lifecycle


class Gateway:
    def __init__(self):
        self.woken = []

    def wake(self, server_id):
        self.woken.append(server_id)


def test_the_gateway_is_woken_on_commit_only(app, world):
    org = world.org()
    project = world.project(org)
    env = world.environment(project, "deploying")
    settings, gateway = app.extensions["berth"].settings, Gateway()
    with database.atomic():
        lifecycle.start(env, project, settings, trigger="manual", gateway=gateway)
        assert gateway.woken == []  # the command is not visible to the gateway yet
    assert gateway.woken == [env.server_id]

    with pytest.raises(RuntimeError), database.atomic():
        lifecycle.start(env, project, settings, trigger="manual", gateway=gateway)
        raise RuntimeError("the request failed after queueing")
    assert gateway.woken == [env.server_id]  # rolled back: nothing to send, no wake
    assert AgentCommand.select().count() == 1


def test_the_queue_imports_nothing_above_it():
    code = ("import sys; import control_plane.services.deploys.queue; "
            "print(sorted(m for m in sys.modules if m.startswith('control_plane.services')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    assert "lifecycle" not in loaded and "actions" not in loaded and "deployments" not in loaded
