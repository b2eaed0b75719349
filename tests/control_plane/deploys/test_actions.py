"""The deployment-operations surface at /api/v1 over HTTP, on both backends:
user tokens, permissions, rules 1-9 of the spec, the per-organization limits,
the list, the environment settings, and that refused requests change nothing.

The agent's side is played by the services the gateway calls (acknowledge,
result); the real agent and containers are in tests/e2e/deploys/test_operations_flow.py."""

import itertools
import threading
import time

import pytest

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import (
    AgentCommand,
    Deployment,
    Environment,
    Event,
    Server,
    TaskLogLine,
    UserToken,
)
from control_plane.services.accounts import orgs
from control_plane.services.tasks import engine, queue
from tests.support.waiting import wait_for

V1 = "/api/v1"
DEPLOY, CANCEL = "project.environments.deploy", "project.deployments.cancel"
_n = itertools.count()


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


class Ops:
    def __init__(self, world, permissions=(DEPLOY, CANCEL)):
        self.world = world
        self.org = world.org()
        self.server = world.server(self.org)
        self.project = world.project(self.org, self.server)
        self.user = world.user(self.org, permissions=permissions)
        self.h = bearer(orgs.issue_user_token(self.user.id))

    def env(self, status="running", branch="main", **kw):
        return Environment.create(project=self.project, server=self.server, name=f"env-{next(_n)}",
                                  status=status, branch=branch, cpu_cores=1.0, ram_mb=1024, **kw)

    def deployment(self, env, status="success", kind="deploy", trigger="manual", **kw):
        version = Deployment.select().where(Deployment.environment == env.id).count() + 1
        fields = {"git_branch": env.branch, "git_commit": f"{version:040x}",
                  "image_tag": f"erp:{version}", "config": {"cpu_cores": 0.5, "ram_mb": 512},
                  **kw}
        return Deployment.create(environment=env, project=self.project, version=version,
                                 kind=kind, trigger=trigger, status=status, **fields)

    def user_with(self, *permissions):
        user = self.world.user(self.org, permissions=permissions)
        return bearer(orgs.issue_user_token(user.id))


@pytest.fixture
def ops(world):
    return Ops(world)


def snapshot():
    """What a refused request must leave as it was."""
    return (Deployment.select().count(), AgentCommand.select().count(),
            sorted((str(e.id), e.status, e.branch, e.is_active, e.auto_deploy)
                   for e in Environment.select()),
            sorted((str(d.id), d.status) for d in Deployment.select()))


def command_of(deployment_id):
    return AgentCommand.get(AgentCommand.deployment == deployment_id)


# --- authentication, permissions, organizations -----------------------------------

def test_token_is_required_and_checked(client, ops):
    d = ops.deployment(ops.env(status="failed"), status="failed")
    url = f"{V1}/deployments/{d.id}/retry"
    r = client.post(url)
    assert r.status_code == 401 and r.json["error"] == "missing_token"
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    for header in ("Bearer usr_live_nope", "Basic abc", "Bearer ", "Bearer " + "x" * 300):
        r = client.post(url, headers={"Authorization": header})
        assert r.status_code == 401 and r.json["error"] == "invalid_token", header
    UserToken.update(expires_at=clock.now()).execute()
    assert client.post(url, headers=ops.h).json["error"] == "token_expired"
    UserToken.update(expires_at=None, revoked_at=clock.now()).execute()
    assert client.post(url, headers=ops.h).status_code == 401
    UserToken.update(revoked_at=None).execute()
    orgs.delete_user(ops.user.id)
    assert client.get(f"{V1}/deployments", headers=ops.h).status_code == 401
    assert Deployment.select().count() == 1


def test_permissions_are_checked(client, ops):
    env = ops.env(status="failed")
    failed = ops.deployment(env, status="failed")
    reader = ops.user_with()
    canceller = ops.user_with(CANCEL)
    before = snapshot()
    for method, url, body in [
        ("post", f"/deployments/{failed.id}/retry", None),
        ("post", f"/deployments/{failed.id}/rollback", None),
        ("post", f"/environments/{env.id}/deploy", {"force": True}),
        ("post", "/deployments", {"project_id": str(ops.project.id),
                                  "environment_id": str(env.id)}),
        ("delete", f"/deployments/environment/{env.id}/destroy", None),
        ("patch", f"/projects/{ops.project.id}/environments/{env.id}", {"auto_deploy": True}),
    ]:
        r = getattr(client, method)(V1 + url, headers=canceller, json=body)
        assert r.status_code == 403 and r.json["error"] == "permission_denied", url
    pending = ops.deployment(ops.env(status="deploying"), status="pending")
    r = client.post(f"{V1}/deployments/{pending.id}/cancel", headers=ops.user_with(DEPLOY))
    assert r.status_code == 403 and "project.deployments.cancel" in r.json["message"]
    # Reading needs membership only.
    assert client.get(f"{V1}/deployments/{failed.id}", headers=reader).status_code == 200
    assert snapshot()[0] == before[0] + 1 and snapshot()[1] == before[1]


def test_another_organization_sees_nothing(client, world, ops):
    env = ops.env(status="failed")
    failed = ops.deployment(env, status="failed")
    other = Ops(world)
    before = snapshot()
    for method, url in [("post", f"/deployments/{failed.id}/retry"),
                        ("post", f"/deployments/{failed.id}/cancel"),
                        ("post", f"/deployments/{failed.id}/rollback"),
                        ("get", f"/deployments/{failed.id}"),
                        ("post", f"/environments/{env.id}/deploy"),
                        ("delete", f"/deployments/environment/{env.id}/destroy"),
                        ("patch", f"/projects/{ops.project.id}/environments/{env.id}"),
                        ("get", f"/deployments?project_id={ops.project.id}")]:
        r = getattr(client, method)(V1 + url, headers=other.h,
                                    json={} if method in ("patch",) else None)
        assert r.status_code == 404 and r.json["error"] == "not_found", url
    r = client.post(f"{V1}/deployments", headers=other.h, json={
        "project_id": str(ops.project.id), "environment_id": str(env.id)})
    assert r.status_code == 404
    assert client.get(f"{V1}/deployments", headers=other.h).json["data"] == []
    assert snapshot() == before


# --- retry (rules 1 and 2) ---------------------------------------------------------

def test_retry_copies_the_failed_deployment(client, ops):
    env = ops.env(status="failed")
    ops.deployment(env, status="success")
    failed = ops.deployment(env, status="failed", git_branch="feature", error_message="boom")
    r = client.post(f"{V1}/deployments/{failed.id}/retry", headers=ops.h)
    assert r.status_code == 201, r.json
    new = r.json
    assert new["id"] != str(failed.id) and new["status"] == "pending" and new["version"] == 3
    assert (new["git_branch"], new["git_commit"], new["image_tag"]) == (
        "feature", failed.git_commit, failed.image_tag)
    assert new["extra_data"] == {"retry_of": str(failed.id)}
    assert new["trigger"] == "manual" and new["triggered_by"] == str(ops.user.id)
    assert new["error_message"] is None and new["started_at"] is None
    assert new["can_rollback"] is False and new["rollback_from_id"] is None
    assert set(new) >= {"id", "project_id", "environment_id", "version", "status", "trigger",
                        "git_commit", "git_branch", "rollback_from_id", "extra_data",
                        "created_at", "started_at", "completed_at", "error_message",
                        "triggered_by", "image_tag", "can_rollback"}
    payload = command_of(new["id"]).payload
    assert payload["git"]["commit"] == failed.git_commit and payload["erp_image"] == "erp:2"
    assert (payload["cpu_cores"], payload["ram_mb"]) == (0.5, 512)
    assert Deployment.get_by_id(new["id"]).config == failed.config
    assert TaskLogLine.select().where(TaskLogLine.deployment == new["id"]).count() == 0
    assert Environment.get_by_id(env.id).status == "deploying"


def test_retry_refusals(client, ops):
    env = ops.env()
    ok = ops.deployment(env, status="success")
    failed = ops.deployment(env, status="failed")
    before = snapshot()
    for d in (ok,):
        r = client.post(f"{V1}/deployments/{d.id}/retry", headers=ops.h)
        assert r.status_code == 400 and r.json["error"] == "deployment_not_failed"
        assert "success" in r.json["message"]
    ops.deployment(env, status="pending")
    before = snapshot()
    r = client.post(f"{V1}/deployments/{failed.id}/retry", headers=ops.h)
    assert r.status_code == 409 and r.json["error"] == "deployment_in_progress"
    r = client.post(f"{V1}/deployments/00000000-0000-0000-0000-000000000000/retry", headers=ops.h)
    assert r.status_code == 404
    assert client.post(f"{V1}/deployments/not-a-uuid/retry", headers=ops.h).status_code == 404
    assert snapshot() == before


def test_a_retried_rollback_stays_a_rollback(client, ops):
    env = ops.env(status="failed")
    target = ops.deployment(env, status="success")
    failed = ops.deployment(env, status="failed", trigger="rollback", rollback_from=target,
                            extra_data={"rollback_to": str(target.id), "rollback_to_version": 1})
    new = client.post(f"{V1}/deployments/{failed.id}/retry", headers=ops.h).json
    assert new["trigger"] == "rollback" and new["rollback_from_id"] == str(target.id)
    assert new["extra_data"] == {"rollback_to": str(target.id), "rollback_to_version": 1,
                                 "retry_of": str(failed.id)}


# --- cancel (rules 3 and 4) --------------------------------------------------------

def _queue(client, ops, env, **body):
    r = client.post(f"{V1}/environments/{env.id}/deploy", headers=ops.h,
                    json={"force": True, **body})
    assert r.status_code == 201, r.json
    return r.json["deployment"]


def test_cancel_a_pending_deployment(client, ops):
    env = ops.env(status="stopped")
    ops.deployment(env, status="success", kind="deploy")
    ops.deployment(env, status="success", kind="stop")
    d = _queue(client, ops, env)
    assert Environment.get_by_id(env.id).status == "deploying"
    r = client.post(f"{V1}/deployments/{d['id']}/cancel", headers=ops.h)
    assert r.status_code == 200 and set(r.json) == {"message"}
    assert ops.user.name in r.json["message"]
    row = Deployment.get_by_id(d["id"])
    assert row.status == "cancelled" and row.completed_at is not None
    assert row.extra_data["cancelled_by"]["id"] == str(ops.user.id)
    # Back to the last stable state: the last settled deployment stopped it.
    assert Environment.get_by_id(env.id).status == "stopped"
    line = TaskLogLine.get(TaskLogLine.deployment == d["id"])
    assert line.level == "warning" and ops.user.name in line.message
    log = client.get(f"{V1}/deployments/{d['id']}", headers=ops.h).json
    assert log["status"] == "cancelled"
    event = Event.get(Event.name == "deploy.cancelled")
    assert event.data["task_id"] == d["id"] and event.data["cancelled_by"] == str(ops.user.id)
    # The queued command is withdrawn: never delivered.
    assert command_of(d["id"]).status == "withdrawn"
    assert queue.undelivered(ops.server.id) == []
    # A late acknowledgement changes nothing.
    engine.record_ack(ops.server.id, command_of(d["id"]).id.hex)
    assert Deployment.get_by_id(d["id"]).status == "cancelled"


def test_a_late_result_does_not_change_a_cancelled_deployment(client, ops):
    env = ops.env(status="running")
    ops.deployment(env, status="success")
    d = _queue(client, ops, env)
    command = command_of(d["id"])
    queue.mark_delivered(command.id)
    engine.record_ack(ops.server.id, command.id.hex)
    assert Deployment.get_by_id(d["id"]).status == "running"
    assert client.post(f"{V1}/deployments/{d['id']}/cancel", headers=ops.h).status_code == 200
    assert Environment.get_by_id(env.id).status == "running"
    engine.record_result(ops.server.id, command.id.hex, True,
                           {"git_commit": "f" * 40, "erp_container": "new"})
    row = Deployment.get_by_id(d["id"])
    assert row.status == "cancelled" and row.git_commit is None
    env = Environment.get_by_id(env.id)
    assert env.status == "running" and env.erp_container is None
    assert not Event.select().where(Event.name == "deploy.completed").exists()
    engine.record_result(ops.server.id, command.id.hex, False, None, "late failure")
    assert Deployment.get_by_id(d["id"]).status == "cancelled"


def test_cancelling_a_first_deployment_leaves_the_environment_pending(client, ops):
    env = ops.env(status="deploying")
    d = ops.deployment(env, status="pending")
    assert client.post(f"{V1}/deployments/{d.id}/cancel", headers=ops.h).status_code == 200
    assert Environment.get_by_id(env.id).status == "pending"
    failed_env = ops.env(status="deploying")
    ops.deployment(failed_env, status="failed")
    d2 = ops.deployment(failed_env, status="running")
    assert client.post(f"{V1}/deployments/{d2.id}/cancel", headers=ops.h).status_code == 200
    assert Environment.get_by_id(failed_env.id).status == "failed"


def test_cancel_refusals(client, ops):
    env = ops.env()
    before_rows = {s: ops.deployment(env, status=s) for s in ("success", "failed", "cancelled")}
    destroying = ops.deployment(ops.env(status="destroying"), status="pending", kind="destroy",
                                trigger="destroy")
    before = snapshot()
    for d in (*before_rows.values(), destroying):
        r = client.post(f"{V1}/deployments/{d.id}/cancel", headers=ops.h)
        assert r.status_code == 400 and r.json["error"] == "deployment_not_cancellable", d.status
    assert snapshot() == before
    assert not TaskLogLine.select().exists() and not Event.select().exists()


# --- rollback (rule 5) -------------------------------------------------------------

def test_rollback_to_a_successful_deployment(client, ops):
    env = ops.env()
    target = ops.deployment(env, status="success", git_branch="release",
                            config={"cpu_cores": 2.0, "ram_mb": 2048})
    ops.deployment(env, status="success")
    r = client.post(f"{V1}/deployments/{target.id}/rollback", headers=ops.h)
    assert r.status_code == 201, r.json
    new = r.json
    assert (new["status"], new["trigger"], new["version"]) == ("pending", "rollback", 3)
    assert new["rollback_from_id"] == str(target.id)
    assert new["extra_data"] == {"rollback_to": str(target.id), "rollback_to_version": 1}
    assert (new["git_commit"], new["image_tag"], new["git_branch"]) == (
        target.git_commit, "erp:1", "release")
    payload = command_of(new["id"]).payload
    assert payload["git"] == {"url": None, "branch": "release", "commit": target.git_commit}
    assert (payload["erp_image"], payload["cpu_cores"], payload["ram_mb"]) == ("erp:1", 2.0, 2048)
    assert Environment.get_by_id(env.id).status == "deploying"
    listed = client.get(f"{V1}/deployments/{target.id}", headers=ops.h).json
    assert listed["can_rollback"] is True


def test_rollback_refusals(client, ops):
    env = ops.env()
    not_ok = [ops.deployment(env, status=s) for s in ("failed", "cancelled", "pending")]
    not_ok.append(ops.deployment(env, status="success", can_rollback=False))
    not_ok.append(ops.deployment(env, status="success", kind="stop"))
    ok = ops.deployment(env, status="success")
    before = snapshot()
    for d in not_ok:  # 400 comes before the 409 that the pending one would cause
        r = client.post(f"{V1}/deployments/{d.id}/rollback", headers=ops.h)
        assert r.status_code == 400 and r.json["error"] == "rollback_not_allowed", d.status
    r = client.post(f"{V1}/deployments/{ok.id}/rollback", headers=ops.h)
    assert r.status_code == 409 and r.json["error"] == "deployment_in_progress"
    assert snapshot() == before


# --- deploy (rules 6, 7, 8) ------------------------------------------------------------

def test_deploy_without_force_skips_a_running_environment(client, ops):
    env = ops.env(status="running")
    last = ops.deployment(env, status="success")
    before = snapshot()
    for body in (None, {}, {"force": False}, {"git_branch": "main"}):
        r = client.post(f"{V1}/environments/{env.id}/deploy", headers=ops.h, json=body)
        assert r.status_code == 200 and r.json["skipped"] is True, body
        assert r.json["deployment"]["id"] == str(last.id)
    assert snapshot() == before


def test_deploy_creates_a_deployment(client, ops):
    env = ops.env(status="running")
    r = client.post(f"{V1}/environments/{env.id}/deploy", headers=ops.h,
                    json={"git_branch": "feature/x"})
    assert r.status_code == 201 and r.json["skipped"] is False
    d = r.json["deployment"]
    assert (d["kind"], d["trigger"], d["git_branch"], d["status"]) == (
        "deploy", "manual", "feature/x", "pending")
    assert Environment.get_by_id(env.id).branch == "feature/x"
    failed = ops.env(status="failed")
    r = client.post(f"{V1}/environments/{failed.id}/deploy", headers=ops.h)
    assert r.status_code == 201 and r.json["deployment"]["kind"] == "deploy"


def test_force_redeploys_with_the_current_configuration(client, ops):
    env = ops.env(status="running")
    ops.deployment(env, status="success")
    r = client.post(f"{V1}/environments/{env.id}/deploy", headers=ops.h, json={"force": True})
    assert r.status_code == 201
    d = r.json["deployment"]
    assert d["kind"] == "redeploy" and d["version"] == 2 and d["git_commit"] is None
    payload = command_of(d["id"]).payload
    assert command_of(d["id"]).kind == "deploy" and payload["delete_data"] is False
    assert (payload["cpu_cores"], payload["ram_mb"]) == (1.0, 1024)
    assert Environment.get_by_id(env.id).status == "deploying"
    # One deployment at a time, with or without force (rule 8).
    before = snapshot()
    for body in ({"force": True}, {}, {"force": False, "git_branch": "other"}):
        r = client.post(f"{V1}/environments/{env.id}/deploy", headers=ops.h, json=body)
        assert r.status_code == 409 and r.json["error"] == "deployment_in_progress"
    assert snapshot() == before


def test_deploy_bad_input(client, ops):
    env = ops.env(status="failed")
    before = snapshot()
    url = f"{V1}/environments/{env.id}/deploy"
    for body in ({"force": "maybe"}, {"git_branch": "has space"}, {"git_branch": ""},
                 {"git_branch": "x" * 256}, {"force": True, "extra": 1}, [1]):
        r = client.post(url, headers=ops.h, json=body)
        assert r.status_code == 422 and r.json["error"] == "validation_error", body
    r = client.post(url, headers={**ops.h, "Content-Type": "application/json"}, data="{nope")
    assert r.status_code == 400 and r.json["error"] == "bad_request"
    assert client.post(f"{V1}/environments/{ops.project.id}/deploy", headers=ops.h).status_code == 404
    assert snapshot() == before


# --- POST /deployments, GET /deployments, PATCH settings ----------------------------

def test_manual_deployment(client, ops):
    env = ops.env(status="running")
    body = {"project_id": str(ops.project.id), "environment_id": str(env.id)}
    r = client.post(f"{V1}/deployments", headers=ops.h, json={**body, "git_branch": "develop"})
    assert r.status_code == 201, r.json
    assert (r.json["trigger"], r.json["git_branch"], r.json["status"]) == (
        "manual", "develop", "pending")
    before = snapshot()
    r = client.post(f"{V1}/deployments", headers=ops.h, json=body)
    assert r.status_code == 409 and r.json["error"] == "deployment_in_progress"
    other_project = ops.world.project(ops.org, ops.server)
    r = client.post(f"{V1}/deployments", headers=ops.h,
                    json={**body, "project_id": str(other_project.id)})
    assert r.status_code == 404
    for bad in ({}, {"project_id": "x", "environment_id": str(env.id)},
                {**body, "git_branch": 5}):
        r = client.post(f"{V1}/deployments", headers=ops.h, json=bad)
        assert r.status_code == 422 and r.json["error"] == "validation_error"
    assert snapshot() == before


def test_list_filters_and_pages(client, ops):
    a, b = ops.env(), ops.env()
    other_project = ops.world.project(ops.org, ops.server)
    c = Environment.create(project=other_project, server=ops.server, name="c", status="failed")
    for env in (a, b):
        ops.deployment(env, status="success")
        ops.deployment(env, status="failed")
    Deployment.create(environment=c, project=other_project, version=1, kind="deploy",
                      trigger="git_push", status="failed")
    everything = client.get(f"{V1}/deployments", headers=ops.h).json
    assert everything["pagination"] == {"has_more": False, "next_cursor": None, "total": 5}
    stamps = [d["created_at"] for d in everything["data"]]
    assert stamps == sorted(stamps, reverse=True)
    mine = client.get(f"{V1}/deployments?project_id={ops.project.id}", headers=ops.h).json
    assert mine["pagination"]["total"] == 4
    assert {d["project_id"] for d in mine["data"]} == {str(ops.project.id)}
    failed = client.get(f"{V1}/deployments?status=failed", headers=ops.h).json["data"]
    assert len(failed) == 3 and {d["status"] for d in failed} == {"failed"}
    assert [d["trigger"] for d in failed if d["environment_id"] == str(c.id)] == ["git_push"]
    both = client.get(f"{V1}/deployments?status=failed&project_id={other_project.id}",
                      headers=ops.h).json["data"]
    assert [d["environment_id"] for d in both] == [str(c.id)]
    first = client.get(f"{V1}/deployments?limit=2", headers=ops.h).json
    assert first["pagination"]["has_more"] is True and len(first["data"]) == 2
    second = client.get(f"{V1}/deployments?limit=2&cursor={first['pagination']['next_cursor']}",
                        headers=ops.h).json
    assert not {d["id"] for d in first["data"]} & {d["id"] for d in second["data"]}
    r = client.get(f"{V1}/deployments?status=failed&cursor={first['pagination']['next_cursor']}",
                   headers=ops.h)
    assert r.status_code == 400 and r.json["error"] == "invalid_cursor"
    for query in ("status=bogus", "project_id=nope", "limit=0", "limit=101"):
        r = client.get(f"{V1}/deployments?{query}", headers=ops.h)
        assert r.status_code == 422 and r.json["error"] == "validation_error", query


def test_environment_settings(client, ops):
    env = ops.env()
    url = f"{V1}/projects/{ops.project.id}/environments/{env.id}"
    r = client.patch(url, headers=ops.h, json={"auto_deploy": True})
    assert r.status_code == 200
    assert (r.json["auto_deploy"], r.json["git_branch"], r.json["id"]) == (True, "main", str(env.id))
    r = client.patch(url, headers=ops.h, json={"git_branch": "release/2"})
    assert (r.json["auto_deploy"], r.json["git_branch"]) == (True, "release/2")
    assert client.patch(url, headers=ops.h, json={}).json["git_branch"] == "release/2"
    assert Deployment.select().count() == 0  # nothing deployed now
    before = snapshot()
    for body in ({"auto_deploy": "sometimes"}, {"git_branch": "a b"}, {"name": "x"}):
        r = client.patch(url, headers=ops.h, json=body)
        assert r.status_code == 422, body
    other = ops.world.project(ops.org, ops.server)
    r = client.patch(f"{V1}/projects/{other.id}/environments/{env.id}", headers=ops.h,
                     json={"auto_deploy": False})
    assert r.status_code == 404
    assert snapshot() == before


def test_automatic_revert_is_on_until_turned_off(client, ops):
    """`auto_revert`: shown true by default, turned off by PATCH, carried by the
    next deploy's command for its agent."""
    env = ops.env()
    ops.deployment(env, status="success", kind="deploy")
    url = f"{V1}/projects/{ops.project.id}/environments/{env.id}"
    assert client.patch(url, headers=ops.h, json={}).json["auto_revert"] is True
    assert command_of(_queue(client, ops, env)["id"]).payload["auto_revert"] is True
    Deployment.update(status="success").execute()
    Environment.update(status="running").where(Environment.id == env.id).execute()
    r = client.patch(url, headers=ops.h, json={"auto_revert": False})
    assert r.status_code == 200 and r.json["auto_revert"] is False
    assert (r.json["auto_deploy"], r.json["git_branch"]) == (False, "main")  # the others stay
    assert command_of(_queue(client, ops, env)["id"]).payload["auto_revert"] is False
    for bad in ("no", 0, None):
        r = client.patch(url, headers=ops.h, json={"auto_revert": bad})
        assert r.status_code == 422 and r.json["error"] == "validation_error", bad
    assert Environment.get_by_id(env.id).auto_revert is False



def test_post_deploy_checks_enforce_until_set_to_warn(client, ops):
    """`post_deploy_checks`: `enforce` by default, `warn` by PATCH, carried by the
    next deploy's command; anything else is a 422 that changes nothing."""
    env = ops.env()
    ops.deployment(env, status="success", kind="deploy")
    url = f"{V1}/projects/{ops.project.id}/environments/{env.id}"
    assert client.patch(url, headers=ops.h, json={}).json["post_deploy_checks"] == "enforce"
    assert command_of(_queue(client, ops, env)["id"]).payload["post_deploy_checks"] == "enforce"
    Deployment.update(status="success").execute()
    Environment.update(status="running").where(Environment.id == env.id).execute()
    r = client.patch(url, headers=ops.h, json={"post_deploy_checks": "warn"})
    assert r.status_code == 200 and r.json["post_deploy_checks"] == "warn"
    assert r.json["auto_revert"] is True  # the others stay
    assert command_of(_queue(client, ops, env)["id"]).payload["post_deploy_checks"] == "warn"
    for bad in ("sometimes", "", None, True):
        r = client.patch(url, headers=ops.h, json={"post_deploy_checks": bad})
        assert r.status_code == 422 and r.json["error"] == "validation_error", bad
    assert Environment.get_by_id(env.id).post_deploy_checks == "warn"



def test_modules_to_install_are_a_setting_each_deploy_carries(client, ops):
    """`install_modules`: none by default; a list of technical names, duplicates
    dropped, carried by the next deploy's command; a bad name or a list too long
    is a 422 that changes nothing; [] clears it."""
    env = ops.env()
    ops.deployment(env, status="success", kind="deploy")
    url = f"{V1}/projects/{ops.project.id}/environments/{env.id}"
    assert client.patch(url, headers=ops.h, json={}).json["install_modules"] == []
    assert command_of(_queue(client, ops, env)["id"]).payload["install_modules"] == []
    Deployment.update(status="success").execute()
    Environment.update(status="running").where(Environment.id == env.id).execute()
    r = client.patch(url, headers=ops.h, json={"install_modules": ["sale", "shop_extra", "sale"]})
    assert r.status_code == 200 and r.json["install_modules"] == ["sale", "shop_extra"]
    assert r.json["auto_revert"] is True  # the others stay
    assert command_of(_queue(client, ops, env)["id"]).payload["install_modules"] == \
        ["sale", "shop_extra"]
    for bad in (["sale,stock"], ["a b"], [""], ["x" * 129], "sale", None, [1],
                [f"m{i}" for i in range(101)]):
        r = client.patch(url, headers=ops.h, json={"install_modules": bad})
        assert r.status_code == 422 and r.json["error"] == "validation_error", bad
        assert "install_modules" in r.json["details"]["json"], bad
    assert Environment.get_by_id(env.id).install_modules == ["sale", "shop_extra"]
    r = client.patch(url, headers=ops.h, json={"install_modules": []})
    assert r.status_code == 200 and r.json["install_modules"] == []
    assert Environment.get_by_id(env.id).install_modules is None

# --- destroy (rule 9) ----------------------------------------------------------------

def connect(server):
    now = clock.now()
    Server.update(connected_since=now, last_seen_at=now).where(Server.id == server.id).execute()


class StandInAgent(threading.Thread):
    """Stands in for the real agent (tests/e2e/deploys/test_operations_flow.py runs it):
    takes the server's destroy command and reports a result through the same
    service calls the gateway makes."""

    def __init__(self, server, ok=True, result=None, delay=0.0):
        super().__init__(daemon=True)
        self.server, self.ok, self.delay = server, ok, delay
        self.result = result
        self.seen = None

    def run(self):
        with database.connection_context():
            due = wait_for(lambda: queue.undelivered(self.server.id), timeout=20,
                           what="the server's command")
            command = self.seen = due[0]
            queue.mark_delivered(command.id)
            engine.record_ack(self.server.id, command.id.hex)
            time.sleep(self.delay)  # the agent at work
            engine.record_result(self.server.id, command.id.hex, self.ok, self.result,
                                   None if self.ok else "the engine refused")


def test_destroy_waits_for_the_agent(client, ops):
    connect(ops.server)
    env = ops.env(erp_container="erp-1", db_container="db-1")
    ops.deployment(env, status="success")
    agent = StandInAgent(ops.server, result={"deleted_containers": 2, "deleted_database": True,
                                             "deleted_data": True})
    agent.start()
    r = client.delete(f"{V1}/deployments/environment/{env.id}/destroy?delete_data=true",
                      headers=ops.h)
    agent.join()
    assert r.status_code == 200, r.json
    body = r.json
    assert {k: body[k] for k in ("environment_id", "deleted_containers", "deleted_database",
                                 "deleted_data")} == {
        "environment_id": str(env.id), "deleted_containers": 2, "deleted_database": True,
        "deleted_data": True}
    assert body["message"]
    assert agent.seen.kind == "destroy" and agent.seen.payload["delete_data"] is True
    row = Environment.get_by_id(env.id)
    assert (row.status, row.is_active, row.erp_container, row.db_container) == (
        "destroyed", False, None, None)
    record = Deployment.get_by_id(body["deployment_id"])
    assert (record.trigger, record.kind, record.status) == ("destroy", "destroy", "destroyed")
    # The public API no longer lists it and shows it `pending`; this surface can
    # deploy it again.
    key, _ = ops.world.key(ops.org)
    shown = client.get(f"/api/public/v1/environments/{env.id}", headers=bearer(key))
    assert shown.status_code == 200 and shown.json["status"] == "pending"
    assert env.id.hex not in str(client.get(f"/api/public/v1/projects/{env.project_id}/"
                                            "environments", headers=bearer(key)).json)
    r = client.post(f"{V1}/environments/{env.id}/deploy", headers=ops.h)
    assert r.status_code == 201 and Environment.get_by_id(env.id).is_active
    # Cancelled before it ran: destroyed again.
    client.post(f"{V1}/deployments/{r.json['deployment']['id']}/cancel", headers=ops.h)
    row = Environment.get_by_id(env.id)
    assert (row.status, row.is_active) == ("destroyed", False)
    # Receivers saw the destroy end, the environment leave the API, come back, and leave.
    events = [(e.name, e.data) for e in Event.select().where(Event.organization == ops.org.id)
              .order_by(Event.created_at, Event.id)]
    # A destroy is no deployment of code: no deploy.* event of its own.
    assert [n for n, _ in events if n != "environment.status_changed"] == [
        "environment.deleted", "environment.created", "environment.deleted", "deploy.cancelled"]
    cancelled = next(d for n, d in events if n == "deploy.cancelled")
    assert (cancelled["kind"], cancelled["environment_status"]) == ("deploy", "pending")


def test_destroy_keeps_data_by_default_and_reports_agent_failure(client, ops):
    connect(ops.server)
    env = ops.env()
    agent = StandInAgent(ops.server, result={"deleted_containers": 2, "deleted_database": True,
                                             "deleted_data": False})
    agent.start()
    r = client.delete(f"{V1}/deployments/environment/{env.id}/destroy", headers=ops.h)
    agent.join()
    assert r.status_code == 200 and r.json["deleted_data"] is False
    assert agent.seen.payload["delete_data"] is False
    env2 = ops.env()
    agent = StandInAgent(ops.server, ok=False)
    agent.start()
    r = client.delete(f"{V1}/deployments/environment/{env2.id}/destroy", headers=ops.h)
    agent.join()
    assert r.status_code == 502 and r.json["error"] == "destroy_failed"
    assert "the engine refused" in r.json["message"]
    assert Deployment.get_by_id(r.json["deployment_id"]).status == "failed"
    assert Environment.get_by_id(env2.id).status == "failed"


def test_destroy_timeout_and_late_completion(client, app, ops):
    app.extensions["berth"].settings["DESTROY_WAIT_SECONDS"] = 0.5
    connect(ops.server)
    env = ops.env()
    r = client.delete(f"{V1}/deployments/environment/{env.id}/destroy", headers=ops.h)
    assert r.status_code == 504 and r.json["error"] == "destroy_timeout"
    d = r.json["deployment_id"]
    assert Environment.get_by_id(env.id).status == "destroying"
    assert command_of(d).status == "queued"  # delivered when the agent comes back
    busy = client.post(f"{V1}/environments/{env.id}/deploy", headers=ops.h, json={"force": True})
    assert busy.status_code == 409
    engine.record_result(ops.server.id, command_of(d).id.hex, True,
                           {"deleted_containers": 1, "deleted_database": True,
                            "deleted_data": False})
    assert Deployment.get_by_id(d).status == "destroyed"
    row = Environment.get_by_id(env.id)
    assert (row.status, row.is_active) == ("destroyed", False)


def test_a_destroyed_environment_destroyed_again_is_seen_meanwhile(client, app, ops):
    """(Found by the lifecycle model.) Its second destroy, with its data, leaves it
    inactive while it runs: both APIs still show it, `destroying`, then `pending`."""
    app.extensions["berth"].settings["DESTROY_WAIT_SECONDS"] = 0.2
    connect(ops.server)
    env = ops.env()
    key, _ = ops.world.key(ops.org)
    for _ in range(2):
        r = client.delete(f"{V1}/deployments/environment/{env.id}/destroy?delete_data=true",
                          headers=ops.h)
        assert r.status_code == 504, r.json
        shown = client.get(f"/api/public/v1/environments/{env.id}", headers=bearer(key))
        assert shown.status_code == 200 and shown.json["status"] == "destroying"
        command = command_of(r.json["deployment_id"])
        engine.record_result(ops.server.id, command.id.hex, True, {"deleted_containers": 0})
        shown = client.get(f"/api/public/v1/environments/{env.id}", headers=bearer(key))
        assert shown.status_code == 200 and shown.json["status"] == "pending"


def test_destroy_refusals(client, ops):
    env = ops.env()
    before = snapshot()
    r = client.delete(f"{V1}/deployments/environment/{env.id}/destroy", headers=ops.h)
    assert r.status_code == 502 and r.json["error"] == "server_unreachable"
    connect(ops.server)
    r = client.delete(f"{V1}/deployments/environment/{env.id}/destroy?delete_data=perhaps",
                      headers=ops.h)
    assert r.status_code == 422
    assert snapshot() == before
    ops.deployment(env, status="pending")
    before = snapshot()
    r = client.delete(f"{V1}/deployments/environment/{env.id}/destroy", headers=ops.h)
    assert r.status_code == 409 and r.json["error"] == "deployment_in_progress"
    assert snapshot() == before


def test_destroy_of_an_environment_without_a_server(client, ops):
    env = Environment.create(project=ops.project, server=None, name="nowhere", status="failed")
    r = client.delete(f"{V1}/deployments/environment/{env.id}/destroy", headers=ops.h)
    assert r.status_code == 200 and r.json["deleted_containers"] == 0
    assert Environment.get_by_id(env.id).status == "destroyed"


def test_a_destroyed_environment_is_stored_destroyed_shown_pending_and_deployable(client, ops):
    """Destroyed is its own stored status (not "never deployed"); where the spec
    fixes the values it reads `pending`; it may be deployed again."""
    connect(ops.server)
    env = ops.env()
    agent = StandInAgent(ops.server, result={"deleted_containers": 2})
    agent.start()
    r = client.delete(f"{V1}/deployments/environment/{env.id}/destroy", headers=ops.h)
    agent.join()
    assert r.status_code == 200, r.json
    row = Environment.get_by_id(env.id)
    assert (row.status, row.is_active) == ("destroyed", False)
    changes = [e.data for e in Event.select().where(Event.organization == ops.org.id,
                                                    Event.name == "environment.status_changed")
               .order_by(Event.created_at, Event.id)]
    assert changes[-1]["to"] == "pending" and "destroyed" not in str(changes)
    r = client.post(f"{V1}/environments/{env.id}/deploy", headers=ops.h)
    assert r.status_code == 201, r.json
    row = Environment.get_by_id(env.id)
    assert (row.status, row.is_active) == ("deploying", True)
    key, _ = ops.world.key(ops.org)
    shown = client.get(f"/api/public/v1/environments/{env.id}", headers=bearer(key))
    assert shown.status_code == 200 and shown.json["status"] == "deploying"
    changes = [e.data for e in Event.select().where(Event.organization == ops.org.id,
                                                    Event.name == "environment.status_changed")
               .order_by(Event.created_at, Event.id)]
    assert (changes[-1]["from"], changes[-1]["to"]) == ("pending", "deploying")


# --- limits ---------------------------------------------------------------------------

def test_ten_deployments_a_minute_per_organization(client, world, ops):
    envs = [ops.env(status="failed") for _ in range(11)]
    busy = ops.env(status="deploying")
    ops.deployment(busy, status="pending")
    for env in envs[:10]:
        r = client.post(f"{V1}/deployments", headers=ops.h, json={
            "project_id": str(ops.project.id), "environment_id": str(env.id)})
        assert r.status_code == 201, r.json
        # Refused requests use no slot.
        assert client.post(f"{V1}/environments/{busy.id}/deploy", headers=ops.h).status_code == 409
    before = snapshot()
    r = client.post(f"{V1}/environments/{envs[10].id}/deploy", headers=ops.user_with(DEPLOY))
    assert r.status_code == 429 and r.json["error"] == "target_rate_limit"
    assert r.json["retry_after"] >= 1 and int(r.headers["Retry-After"]) >= 1
    assert "deployments" in r.json["message"]
    assert snapshot() == before
    other = Ops(world)
    env = other.env(status="failed")
    assert client.post(f"{V1}/environments/{env.id}/deploy", headers=other.h).status_code == 201


def test_ten_manual_retries_a_minute_per_organization(client, ops):
    failed = []
    for _ in range(11):
        env = ops.env(status="failed")
        failed.append(ops.deployment(env, status="failed"))
    for d in failed[:10]:
        assert client.post(f"{V1}/deployments/{d.id}/retry", headers=ops.h).status_code == 201
    r = client.post(f"{V1}/deployments/{failed[10].id}/retry", headers=ops.h)
    assert r.status_code == 429 and "retries" in r.json["message"]
    assert Deployment.select().where(Deployment.status == "pending").count() == 10


def test_the_deployment_limit_counts_both_surfaces(client, ops):
    """Environment creates and actions on the public API and the operations here
    share the organization's 10 a minute; a refusal there uses no slot."""
    key, _ = ops.world.key(ops.org)
    envs = [ops.env(status="running") for _ in range(5)]
    for env in envs[:4]:
        r = client.post(f"/api/public/v1/environments/{env.id}/actions/restart",
                        headers=bearer(key))
        assert r.status_code == 202, r.json
    for n in range(5):
        r = client.post(f"/api/public/v1/projects/{ops.project.id}/environments",
                        headers=bearer(key), json={"name": f"new-{n}"})
        assert r.status_code == 201, r.json
    failed = ops.env(status="failed")
    retried = ops.deployment(failed, status="failed")
    assert client.post(f"{V1}/deployments/{retried.id}/retry", headers=ops.h).status_code == 201
    before = snapshot()
    r = client.post(f"{V1}/environments/{envs[4].id}/deploy", headers=ops.h,
                    json={"force": True})
    assert r.status_code == 429 and r.json["error"] == "target_rate_limit"
    r = client.post(f"/api/public/v1/environments/{envs[4].id}/actions/stop", headers=bearer(key))
    assert r.status_code == 429 and r.json["error"] == "target_rate_limit"
    r = client.post(f"/api/public/v1/projects/{ops.project.id}/environments",
                    headers=bearer(key), json={"name": "one-too-many"})
    assert r.status_code == 429 and snapshot() == before


def test_a_retry_refused_by_the_deployment_limit_keeps_its_retry_slot(client, ops):
    for _ in range(10):
        assert client.post(f"{V1}/environments/{ops.env(status='failed').id}/deploy",
                           headers=ops.h).status_code == 201
    failed = ops.deployment(ops.env(status="failed"), status="failed")
    r = client.post(f"{V1}/deployments/{failed.id}/retry", headers=ops.h)
    assert r.status_code == 429 and "deployments" in r.json["message"]
    limiter = client.application.extensions["berth"].limiter
    from control_plane.services.deploys.actions import RETRIES_PER_MINUTE
    assert limiter.strategy.get_window_stats(
        RETRIES_PER_MINUTE, "ops-retries", ops.org.id.hex).remaining == 10


# --- OpenAPI ------------------------------------------------------------------------------

def test_openapi_documents_every_operation(client):
    r = client.get(f"{V1}/openapi.json")
    assert r.status_code == 200
    spec = r.json
    assert spec["openapi"].startswith("3.")
    expected = {
        "/api/v1/deployments/{deployment_id}/retry": {"post"},
        "/api/v1/deployments/{deployment_id}/cancel": {"post"},
        "/api/v1/deployments/{deployment_id}/rollback": {"post"},
        "/api/v1/environments/{environment_id}/deploy": {"post"},
        "/api/v1/deployments/environment/{environment_id}/destroy": {"delete"},
        "/api/v1/deployments": {"get", "post"},
        "/api/v1/deployments/{deployment_id}": {"get"},
        "/api/v1/projects/{project_id}/environments/{env_id}": {"patch"},
    }
    for path, methods in expected.items():
        assert methods <= set(spec["paths"][path]), path
        for method in methods:
            op = spec["paths"][path][method]
            assert op["summary"] and {"401", "404"} <= set(op["responses"]), (path, method)
            assert any(s.startswith("2") for s in op["responses"])
    record = spec["components"]["schemas"]["Deployment"]["properties"]
    assert {"id", "project_id", "environment_id", "version", "status", "trigger", "git_commit",
            "git_branch", "rollback_from_id", "extra_data", "created_at", "started_at",
            "completed_at", "error_message", "triggered_by", "image_tag",
            "can_rollback"} <= set(record)
    assert {"error", "message"} <= set(spec["components"]["schemas"]["Error"]["properties"])
    _refs_resolve(spec, spec)


def _refs_resolve(node, spec):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if ref:
            target = spec
            for part in ref.lstrip("#/").split("/"):
                target = target[part]
        for value in node.values():
            _refs_resolve(value, spec)
    elif isinstance(node, list):
        for value in node:
            _refs_resolve(value, spec)
