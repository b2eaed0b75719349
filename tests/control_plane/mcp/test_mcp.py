"""The MCP server at /mcp, on both databases, through the official SDK's own client
over streamable HTTP against the app on a real port: the tools a key is offered
(a read-only key sees no write tool and is refused one by name), their
annotations, answers in the public API's shapes with no secret in them, the
arguments' rules, `confirm` on destructive tools, every call an audit event of
the key, and no answer without a valid key."""

import json

import anyio
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from control_plane.models import AuditEvent, Deployment, Environment, TaskLogLine
from control_plane.services.automation import rules
from tests.conftest import new_uuid
from tests.support.agents import http_app  # noqa: F401 - fixture

READS = {"list_projects", "get_project", "list_environments", "get_environment",
         "environment_status", "list_deployments", "get_deployment", "task_log", "runtime_logs",
         "environment_metrics", "environment_size", "list_servers", "server_metrics", "list_backups", "list_rules",
         "get_rule", "list_audit_events", "list_mails", "get_mail", "list_builds", "get_build"}
WRITES = {"start_environment", "stop_environment", "restart_environment",
          "deploy_environment", "redeploy_environment", "backup_environment",
          "restore_environment", "rollback_deployment"}
DESTRUCTIVE = {"deploy_environment", "redeploy_environment", "restore_environment",
               "rollback_deployment"}


def session(url, key, *calls):
    """Each of `calls` in one MCP session as the key: (name, arguments) a tool's,
    None tools/list, a function of the client session what it answers. Their
    results, in order."""
    async def run():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                      timeout=30) as http, \
                streamable_http_client(f"{url}/mcp", http_client=http) as (read, write), \
                ClientSession(read, write) as mcp:
            await mcp.initialize()
            return [await (mcp.list_tools() if call is None else call(mcp) if callable(call)
                           else mcp.call_tool(*call)) for call in calls]
    return anyio.run(run)


def answer(result):
    return json.loads(result.content[0].text)


@pytest.fixture
def fleet(world):
    org = world.org()
    project = world.project(org, world.server(org))
    env = world.environment(project)
    return org, project, env


def test_a_read_only_key_is_offered_the_reads_and_a_full_key_everything(http_app, world, fleet):  # noqa: F811
    org, _, env = fleet
    reader, _ = world.key(org, "read_only")
    writer, _ = world.key(org)
    listed, refused = session(http_app, reader, None,
                              ("stop_environment", {"environment_id": str(env.id)}))
    assert {t.name for t in listed.tools} == READS
    assert refused.is_error and answer(refused)["error"] == "write_access_required"
    (everything,) = session(http_app, writer, None)
    tools = {t.name: t for t in everything.tools}
    assert set(tools) == READS | WRITES
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints.read_only_hint is (name in READS), name
        assert hints.destructive_hint is (name in DESTRUCTIVE), name
        assert hints.idempotent_hint is (name in READS), name
        assert tool.input_schema["type"] == "object" and tool.description, name
        assert ("confirm" in tool.input_schema.get("required", [])) == (name in DESTRUCTIVE)
    assert Deployment.select().where(Deployment.environment == env.id).count() == 0
    # A project-scoped key: no organization-wide tool, and its project only.
    scoped, _ = world.key(org, "read_only", scope="project", project=env.project)
    listed, audit_log, others = session(
        http_app, scoped, None, ("list_audit_events", {}),
        ("list_environments", {"project_id": str(world.project(org).id)}))
    assert {t.name for t in listed.tools} == READS - {"list_audit_events"}
    assert answer(audit_log)["error"] == "org_scope_required"
    assert answer(others)["error"] == "not_found"


def test_answers_are_the_apis_shapes_and_every_call_is_audited(http_app, world, fleet):  # noqa: F811
    org, project, env = fleet
    raw, key = world.key(org, "read_only")
    projects, envs, status, bad, other = session(
        http_app, raw, ("list_projects", {}),
        ("list_environments", {"project_id": str(project.id)}),
        ("environment_status", {"environment_id": str(env.id)}),
        ("task_log", {"environment_id": str(env.id), "lines": 0}),
        ("get_environment", {"environment_id": str(world.environment(
            world.project(world.org())).id)}))
    assert [p["id"] for p in answer(projects)["data"]] == [str(project.id)]
    assert answer(envs)[0]["id"] == str(env.id), answer(envs)
    assert answer(status)["status"] == "running"
    assert bad.is_error and answer(bad)["error"] == "validation_error"
    assert "lines" in answer(bad)["details"]
    assert other.is_error and answer(other)["error"] == "not_found"  # another organization's
    calls = AuditEvent.select().where(AuditEvent.organization == org.id,
                                      AuditEvent.action == "mcp.call")
    assert sorted((e.target_id, e.actor_type, e.actor_id, e.changes["ok"]) for e in calls) == \
        sorted([("list_projects", "api_key", key.public_id, True),
                ("list_environments", "api_key", key.public_id, True),
                ("environment_status", "api_key", key.public_id, True),
                ("task_log", "api_key", key.public_id, False),
                ("get_environment", "api_key", key.public_id, False)])
    rule = rules.create_rule(project, name="nightly", trigger={
        "type": "schedule", "cron": "0 3 * * *", "timezone": "UTC"},
        action={"type": "backup", "environment_id": str(env.id)})
    (shown,) = session(http_app, raw, ("get_rule", {"rule_id": str(rule.id)}))
    assert answer(shown)["name"] == "nightly" and answer(shown)["next_run_at"]
    every = json.dumps([answer(r) for r in (projects, envs, status)])
    assert raw not in every and key.key_hash not in every
    # Caught mails: production has none; a staging copy's server (no agent here) is asked.
    production = world.environment(project)
    Environment.update(environment_type="production").where(
        Environment.id == production.id).execute()
    prod_mails, staging_mails = session(
        http_app, raw, ("list_mails", {"environment_id": str(production.id)}),
        ("list_mails", {"environment_id": str(env.id)}))
    assert prod_mails.is_error and answer(prod_mails)["error"] == "no_mail_catcher"
    assert staging_mails.is_error and answer(staging_mails)["error"] == "server_unreachable"


def test_a_destructive_tool_needs_confirm_and_a_change_is_the_keys(http_app, world, fleet):  # noqa: F811
    org, _, env = fleet
    raw, key = world.key(org)
    unconfirmed, stopped = session(
        http_app, raw, ("redeploy_environment", {"environment_id": str(env.id), "confirm": False}),
        ("stop_environment", {"environment_id": str(env.id)}))
    assert unconfirmed.is_error and "confirm: true" in answer(unconfirmed)["message"]
    assert not stopped.is_error, answer(stopped)
    task = Deployment.get_by_id(answer(stopped)["task_id"])
    assert (task.kind, task.environment_id) == ("stop", env.id)
    assert Deployment.select().where(Deployment.environment == env.id).count() == 1
    changed = AuditEvent.select().where(AuditEvent.organization == org.id,
                                        AuditEvent.action != "mcp.call")
    assert {(e.actor_type, e.actor_id) for e in changed} == {("api_key", key.public_id)}


def test_the_logs_are_resources(http_app, world, fleet, fake_clock):  # noqa: F811
    org, _, env = fleet
    raw, _ = world.key(org, "read_only")
    task = Deployment.create(environment=env, project=env.project_id, version=1, kind="deploy",
                             trigger="manual", status="success", git_branch="main")
    for seq, line in enumerate(("cloning", "health check passed"), 1):
        TaskLogLine.create(deployment=task, seq=seq, message=line)
    uri = f"berth://environments/{env.id}/tasks/{task.id}/log"
    templates, newest, one, elsewhere = session(
        http_app, raw, lambda mcp: mcp.list_resource_templates(),
        lambda mcp: mcp.read_resource(f"berth://environments/{env.id}/task-log"),
        lambda mcp: mcp.read_resource(uri),
        lambda mcp: _refused(mcp.read_resource(f"berth://environments/{new_uuid()}/task-log")))
    assert {t.uri_template for t in templates.resource_templates} == {
        "berth://environments/{environment_id}/task-log",
        "berth://environments/{environment_id}/tasks/{task_id}/log",
        "berth://environments/{environment_id}/runtime-logs/{source}"}
    assert newest.contents[0].text == one.contents[0].text == "cloning\nhealth check passed"
    assert str(one.contents[0].uri) == uri
    assert "not found" in elsewhere.lower()


async def _refused(reading):
    try:
        await reading
    except MCPError as err:
        return err.message
    raise AssertionError("read")


def test_no_key_no_answer(http_app, world, fleet):  # noqa: F811
    import requests

    r = requests.post(f"{http_app}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                      headers={"Accept": "application/json, text/event-stream"}, timeout=10)
    assert r.status_code == 401 and r.json()["error"] == "missing_api_key"
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    r = requests.post(f"{http_app}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                      headers={"Authorization": "Bearer svc_live_ro_nope"}, timeout=10)
    assert r.status_code == 401 and r.json()["error"] == "invalid_api_key"
    # With a key: the answer carries the key's id and window, as the API's do.
    raw, key = world.key(fleet[0], "read_only")
    listed = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    r = requests.post(f"{http_app}/mcp", json=listed, timeout=10, headers={
        "Authorization": f"Bearer {raw}", "Accept": "application/json, text/event-stream"})
    assert r.status_code == 200 and r.json()["result"]["tools"]
    assert r.headers["X-API-Key-Id"] == key.public_id and r.headers["X-RateLimit-Limit"] == "120"
    for method in ("GET", "DELETE"):  # no stream to open, no session to end
        r = requests.request(method, f"{http_app}/mcp", timeout=10,
                             headers={"Authorization": f"Bearer {raw}"})
        assert r.status_code == 405 and "POST" in r.headers["Allow"], method


def test_concurrent_sessions_of_different_keys_each_see_their_own(http_app, world, fleet):  # noqa: F811
    """Requests served at once by the app's threads (one event loop each, one shared
    server): each answers as its own key."""
    from concurrent.futures import ThreadPoolExecutor

    org, _, _ = fleet
    keys = [world.key(org, kind)[0] for kind in ("read_only", "full_access") * 4]

    def offered(key):
        listed, called = session(http_app, key, None, ("list_servers", {}))
        assert not called.is_error, answer(called)
        return {t.name for t in listed.tools}

    with ThreadPoolExecutor(len(keys)) as pool:
        seen = list(pool.map(offered, keys))
    assert seen == [READS, READS | WRITES] * 4
