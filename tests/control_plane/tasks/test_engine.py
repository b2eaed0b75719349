"""The task engine's own guarantees: the gateway is woken only once the task's
command is committed (never after a rollback), and the command queue imports
nothing above it."""

import grimp
import pytest

from control_plane.agent_link import Plain
from control_plane.infra.db import database
from control_plane.models import AgentCommand
from control_plane.services.tasks import engine
from tests.conftest import auth


class Gateway:
    def __init__(self):
        self.woken = []

    def wake(self, server_id):
        self.woken.append(server_id)


def test_the_gateway_is_woken_on_commit_only(app, world):
    org = world.org()
    project = world.project(org)
    env, other = world.environment(project, "running"), world.environment(project, "running")
    settings, gateway = app.extensions["berth"].settings, Gateway()
    with database.atomic():
        engine.start(env, "deploy", berth=Plain(settings, gateway), trigger="manual")
        assert gateway.woken == []  # the command is not visible to the gateway yet
    assert gateway.woken == [env.server_id]

    with pytest.raises(RuntimeError), database.atomic():
        engine.start(other, "deploy", berth=Plain(settings, gateway), trigger="manual")
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
    engine.on_result(AgentCommand.get().deployment_id, True, {}, None)  # the restart is done
    r = client.post(f"/api/public/v1/environments/{env.id}/actions/stop",
                    headers={**headers, "X-Idempotency-Key": "stop-1"})
    assert r.status_code == 202 and gateway.woken == [env.server_id] * 2


def test_the_queue_imports_nothing_above_it():
    """Read from the code, as import-linter reads it: importing the services package
    registers every domain's task kinds, so what a process loads says nothing."""
    graph = grimp.build_graph("control_plane")
    below = graph.find_upstream_modules("control_plane.services.tasks.queue")
    assert not {m for m in below if m.startswith("control_plane.services")}, below
    assert "control_plane.services.tasks.queue" in graph.find_upstream_modules(
        "control_plane.services.tasks.engine")  # it is found: the check can fail
