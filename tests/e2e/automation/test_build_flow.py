"""Builds end to end: a real control plane over HTTP with its automation job running,
a real `berth-agent run`, real containers of the ERP stand-in (which runs add-ons'
tests as Odoo's command line does).

A `test` rule on `feature/*` whose builds run on a neutralised copy of production's
newest backup: the push of a branch whose new module's tests pass (one of them finds
production's customer in the copy, neutralised) gives a build that passes, its status
on the commit in the forge (a GitHub stub), its environment removed at once; a push
whose test fails gives a failed build naming the test and its message, `failure` on
the commit, the environment kept for inspection; a newer push of a branch cancels the
build of the older one."""

import json
import subprocess
import textwrap

import pytest

from control_plane.models import Build, Environment, Project
from control_plane.scheduler import Job, Scheduler
from control_plane.services.automation import triggers
from control_plane.services.projects import git_push
from control_plane.services.projects.addon_repositories import full_name_of
from control_plane.services.webhooks import commit_statuses
from tests.control_plane.projects.test_git_push import post
from tests.support.agents import wait_for
from tests.support.backup_flow import P, completed_backup, deployed, psql, wait_running
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures

PASSING = '''
from odoo.tests import TransactionCase


class TestTotals(TransactionCase):

    def test_admin_is_there(self):
        self.assertEqual(self.env.user.login, "admin")

    def test_on_a_neutralised_copy_of_production(self):
        self.env.cr.execute("SELECT count(*) FROM res_partner WHERE name = 'Copied Customer'")
        self.assertEqual(self.env.cr.fetchone()[0], 1)
        self.env.cr.execute("SELECT value FROM ir_config_parameter"
                            " WHERE key = 'database.is_neutralized'")
        self.assertEqual(self.env.cr.fetchone()[0].lower(), "true")
'''
FAILING = '''
from odoo.tests import TransactionCase


class TestTotals(TransactionCase):

    def test_admin_is_there(self):
        self.assertEqual(self.env.user.login, "admin")

    def test_no_partner_yet(self):
        self.assertEqual(self.env["res.partner"].search_count([]), 0, "partners exist")
'''


@pytest.fixture
def automation(app, trust_ca):  # noqa: F811
    """The automation and commit-statuses jobs, the forge stub reachable and trusted."""
    berth = app.extensions["berth"]
    berth.settings.update(WEBHOOK_ALLOW_PRIVATE=True, WEBHOOK_CA_BUNDLE=trust_ca)
    loop = Scheduler([Job("automation", 0.3, lambda: triggers.run(berth)),
                      Job("commit-statuses", 0.3, lambda: commit_statuses.run(berth))])
    loop.start_in_thread()
    yield loop
    loop.stop()
    berth.settings.update(WEBHOOK_ALLOW_PRIVATE=False, WEBHOOK_CA_BUNDLE=None)


def branch_with(tmp_path, branch, tests):
    """A commit of `branch` (from main) adding the module `shop_totals` with `tests`."""
    work = tmp_path / "work"
    git = ["git", "-c", "user.email=d@example.com", "-c", "user.name=d"]
    subprocess.run(["git", "checkout", "-q", "-B", branch, "main"], cwd=work, check=True)
    module = work / "shop_totals"
    (module / "tests").mkdir(parents=True, exist_ok=True)
    (module / "__init__.py").write_text("")
    (module / "__manifest__.py").write_text(repr({"name": "Shop totals", "version": "1.0",
                                                  "depends": ["base"]}))
    (module / "tests" / "__init__.py").write_text("from . import test_totals\n")
    (module / "tests" / "test_totals.py").write_text(textwrap.dedent(tests))
    for cmd in ([*git, "add", "-A"], [*git, "commit", "-qm", f"{branch}: totals"],
                ["git", "push", "-q", "-f", str(tmp_path / "repo.git"), branch]):
        subprocess.run(cmd, cwd=work, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True,
                          capture_output=True, text=True).stdout.strip()


def push(client, s, secret, branch, after):
    body = json.dumps({"ref": f"refs/heads/{branch}", "before": "0" * 40, "after": after,
                       "pusher": {"name": "ana"}, "commits": [],
                       "repository": {"full_name": full_name_of(
                           Project.get_by_id(s.project.id).git_repo_url)}}).encode()
    r = post(client, body, secret, query=f"?project_id={s.project.id}")
    assert r.status_code == 200, r.json
    return r.json["automation_runs"]


def build_of(client, s, run_id, ended=True):
    wait_for(lambda: (b := Build.get_or_none(Build.run_id == run_id)) is not None and (
        not ended or b.status not in ("queued", "running")), timeout=240, interval=0.5,
        what=f"the build of run {run_id}")
    build = Build.get(Build.run_id == run_id)
    r = client.get(f"{P}/builds/{build.id}", headers=s.reader)
    assert r.status_code == 200, r.json
    return r.json


@pytest.mark.parametrize("stand", ["local"], indirect=True)
def test_a_push_is_built_and_its_tests_decide(client, stand, automation, tmp_path,
                                              https_receiver):  # noqa: F811
    s = stand
    try:
        _builds(client, s, tmp_path, https_receiver)
    finally:  # the builds' environments, kept or not yet removed
        for env in Environment.select().where(Environment.project == s.project.id):
            s.envs.destroy(str(env.id), True, lambda *line: None)


def statuses(forge, commit, count):
    """The commit statuses the forge stub received for `commit`, once `count` did."""
    def sent():
        got = [json.loads(r.body) for r in forge.requests if r.path.endswith(commit)]
        return len(got) >= count and got
    return wait_for(sent, timeout=60, interval=0.3, what=f"{count} statuses of {commit}")


def _builds(client, s, tmp_path, forge):
    secret = git_push.issue_secret(s.project.id, public_url="https://berth.test")["secret"]
    production = deployed(client, s, "Production", "production")
    wait_running(client, s, production)
    psql(s, production, "INSERT INTO res_partner (name) VALUES ('Copied Customer')")
    completed_backup(client, s, production)
    rule = client.post(f"{P}/projects/{s.project.id}/automation-rules", headers=s.key, json={
        "name": "builds", "trigger": {"type": "git_push", "branch": "feature/*"},
        "action": {"type": "test", "keep_hours": 2, "source_environment_id": production}})
    assert rule.status_code == 201, rule.json
    assert rule.json["action"] == {"type": "test", "source_environment_id": production,
                                   "keep_hours": 2, "remove_on_success": True}
    # Results go to the commits in the repository's forge (a GitHub stub here).
    r = client.put(f"{P}/projects/{s.project.id}/forge", headers=s.key, json={
        "provider": "github", "token": "ghp_build", "api_url": forge.url})
    assert r.status_code == 200 and r.json["token_set"] is True

    # A passing test: the build passes, and its environment goes at once.
    good = branch_with(tmp_path, "feature/ok", PASSING)
    [fired] = push(client, s, secret, "feature/ok", good)
    build = build_of(client, s, fired["run_id"])
    assert build["status"] == "passed", build
    assert (build["branch"], build["commit"], build["modules"]) == (
        "feature/ok", good, ["shop_totals"])
    assert build["counts"] == {"tests": 2, "passed": 2, "failed": 0, "error": 0, "skipped": 0}
    assert [t["name"] for t in build["tests"]] == [
        "TestTotals.test_admin_is_there", "TestTotals.test_on_a_neutralised_copy_of_production"]
    assert build["tests"][0]["module"] == "shop_totals"
    assert "Starting TestTotals.test_admin_is_there ..." in build["log"]
    assert build["duration_seconds"] > 0
    wait_for(lambda: client.get(f"{P}/environments/{build['environment_id']}",
                                headers=s.reader).status_code == 404, timeout=120,
             interval=0.5, what="the passing build's environment removed")
    sent = statuses(forge, good, 2)
    assert sent[0]["state"] == "pending" and sent[-1]["state"] == "success"
    assert sent[-1]["target_url"].endswith(f"/builds/{build['id']}")
    assert sent[-1]["context"] == "berth/build" and sent[-1]["description"] == "passed: 2 tests"
    assert forge.requests[0].headers.get("Authorization") == "Bearer ghp_build"

    # A failing test: the build fails, names the test and its message; the
    # environment stays for inspection.
    bad = branch_with(tmp_path, "feature/bad", FAILING)
    [fired] = push(client, s, secret, "feature/bad", bad)
    build = build_of(client, s, fired["run_id"])
    assert build["status"] == "failed", build
    assert build["counts"]["failed"] == 1 and build["counts"]["passed"] == 1
    first = build["tests"][0]  # failures first
    assert (first["name"], first["status"]) == ("TestTotals.test_no_partner_yet", "failed")
    assert "AssertionError" in first["failure"] and "partners exist" in first["failure"]
    assert build["reason"] == "1 failed, 0 error(s) of 2 tests"
    env = client.get(f"{P}/environments/{build['environment_id']}", headers=s.reader)
    assert env.status_code == 200 and env.json["status"] == "running"
    assert statuses(forge, bad, 2)[-1]["state"] == "failure"
    listed = client.get(f"{P}/projects/{s.project.id}/builds", headers=s.reader).json
    assert [b["status"] for b in listed["data"]] == ["failed", "passed"]
    assert "log" not in listed["data"][0] and "tests" not in listed["data"][0]
    only = client.get(f"{P}/projects/{s.project.id}/builds?branch=feature/ok",
                      headers=s.reader).json
    assert [b["branch"] for b in only["data"]] == ["feature/ok"]

    # Two pushes of a branch in a row: the older build is cancelled.
    older = branch_with(tmp_path, "feature/again", PASSING)
    [first_run] = push(client, s, secret, "feature/again", older)
    build_of(client, s, first_run["run_id"], ended=False)
    newer = branch_with(tmp_path, "feature/again", FAILING)
    [second_run] = push(client, s, secret, "feature/again", newer)
    cancelled = build_of(client, s, first_run["run_id"])
    assert cancelled["status"] == "cancelled" and \
        cancelled["reason"] == "a newer push of the branch"
    assert build_of(client, s, second_run["run_id"])["status"] == "failed"
