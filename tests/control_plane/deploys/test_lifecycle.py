"""The lifecycle's own guarantees: the gateway is woken only once the task's
command is committed (never after a rollback), and the command queue imports
nothing above it."""

import subprocess
import sys

import pytest

from control_plane.db import database
from control_plane.models import AgentCommand
from control_plane.services.deploys import lifecycle
from tests.conftest import auth


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


def test_a_request_wakes_the_gateway_once_it_committed(app, client, world):
    """Through the API (plain, idempotent, and refused): one wake per queued task."""
    org = world.org()
    project = world.project(org)
    env = world.environment(project, "running")
    gateway = app.extensions["berth"].gateway = Gateway()
    headers = auth(world.key(org)[0])
    r = client.post(f"/api/public/v1/environments/{env.id}/actions/restart", headers=headers)
    assert r.status_code == 202 and gateway.woken == [env.server_id]
    r = client.post(f"/api/public/v1/environments/{env.id}/actions/restart", headers=headers)
    assert r.status_code == 409 and gateway.woken == [env.server_id]  # refused: no wake
    lifecycle.on_result(AgentCommand.get().deployment_id, True, {}, None)  # the restart is done
    r = client.post(f"/api/public/v1/environments/{env.id}/actions/stop",
                    headers={**headers, "X-Idempotency-Key": "stop-1"})
    assert r.status_code == 202 and gateway.woken == [env.server_id] * 2


def test_the_queue_imports_nothing_above_it():
    code = ("import sys; import control_plane.services.deploys.queue; "
            "print(sorted(m for m in sys.modules if m.startswith('control_plane.services')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    assert "lifecycle" not in loaded and "actions" not in loaded and "deployments" not in loaded
