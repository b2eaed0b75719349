"""Malformed but authenticated input, through HTTP on both databases: text no
database can store (a lone surrogate, NUL), JSON nested too deep, numbers too
long, and loose booleans. Each is a 400 or 422 in the `{error, message}` shape
and changes nothing; never a 500, and the same on SQLite and PostgreSQL."""

import hashlib
import hmac
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from control_plane.infra import secretbox
from control_plane.models import ALL_MODELS, Environment, Project, Webhook
from control_plane.services.accounts import orgs
from control_plane.services.projects import git_push
from tests.conftest import auth

P, V1 = "/api/public/v1", "/api/v1"
HOLE = "@@hole@@"  # where a target's body takes the hostile value
DEPLOY = "project.environments.deploy"
SHA = "a" * 40


class Ctx:
    """An organization with one of everything the endpoints below act on."""

    def __init__(self, world):
        self.org = world.org()
        self.server = world.server(self.org)
        self.project = world.project(self.org, self.server)
        Project.update(git_repo_url="https://github.com/acme/erp.git").where(
            Project.id == self.project.id).execute()
        self.env = world.environment(self.project, status="failed")
        self.running = world.environment(self.project, status="running")
        Environment.update(branch="main", auto_deploy=True).where(
            Environment.id == self.env.id).execute()
        self.key = auth(world.key(self.org, server_registration=True)[0])
        self.webhook = Webhook.create(
            organization=self.org, url="https://hooks.example.com/a", events=["deploy.failed"],
            secret_encrypted=secretbox.seal("whsec_x", "webhook-secret"))
        user = world.user(self.org, permissions=(DEPLOY,))
        self.user = {"Authorization": f"Bearer {orgs.issue_user_token(user.id)}"}
        self.push_secret = git_push.issue_secret(
            self.project.id, public_url="https://berth.example.com")["secret"]


@pytest.fixture
def ctx(world):
    return Ctx(world)


def snapshot():
    """Row counts of every table, and the fields the requests below would change."""
    return ([m.select().count() for m in ALL_MODELS],
            sorted((str(p.id), p.name, p.default_branch) for p in Project.select()),
            sorted((str(e.id), e.name, e.branch, e.auto_deploy, e.status)
                   for e in Environment.select()),
            sorted((str(w.id), w.description, w.is_active, w.url) for w in Webhook.select()))


# Each target: (method, path, headers, body) with HOLE as one field's value; the
# body without anything hostile in it would be accepted.
TARGETS = {
    "project create": lambda c: ("post", f"{P}/projects", c.key,
                                 {"name": HOLE, "server_id": str(c.server.id)}),
    "project patch": lambda c: ("patch", f"{P}/projects/{c.project.id}", c.key, {"name": HOLE}),
    "environment create": lambda c: ("post", f"{P}/projects/{c.project.id}/environments", c.key,
                                     {"name": HOLE}),
    "environment patch": lambda c: ("patch", f"{P}/environments/{c.env.id}", c.key,
                                    {"name": HOLE}),
    "webhook create": lambda c: ("post", f"{P}/webhooks", c.key, {
        "url": "https://hooks.example.com/b", "events": ["deploy.failed"], "description": HOLE}),
    "webhook patch": lambda c: ("patch", f"{P}/webhooks/{c.webhook.id}", c.key,
                                {"description": HOLE}),
    "registration token create": lambda c: ("post", f"{P}/servers/registration-tokens", c.key,
                                            {"server_name": HOLE}),
    "ops deploy": lambda c: ("post", f"{V1}/environments/{c.env.id}/deploy", c.user,
                             {"git_branch": HOLE}),
    "ops settings patch": lambda c: (
        "patch", f"{V1}/projects/{c.project.id}/environments/{c.env.id}", c.user,
        {"git_branch": HOLE}),
    "ops deployment create": lambda c: ("post", f"{V1}/deployments", c.user, {
        "project_id": str(c.project.id), "environment_id": str(c.env.id), "git_branch": HOLE}),
    "ops backup create": lambda c: ("post", f"{V1}/environments/{c.running.id}/backups", c.user,
                                    {"comment": HOLE}),
    "signed push": lambda c: ("post", f"{V1}/webhooks/github", None, {
        "ref": HOLE, "after": SHA, "repository": {"full_name": "acme/erp"},
        "commits": [{"id": SHA, "message": "change"}]}),
}

# A string value keeps a valid prefix, so that only the hostile character is wrong.
VALID = {"ref": "refs/heads/main", "git_branch": "main", "name": "n", "description": "d",
         "server_name": "s", "comment": "c"}
DEEP = 974  # a 2 kB body; Python's parser gave up (RecursionError) at this depth
HOSTILE = {
    "lone surrogate": lambda valid: json.dumps(valid + "\ud800"),
    "NUL": lambda valid: json.dumps(valid + "\x00"),
    "NUL in a key": lambda valid: json.dumps({"a\x00": valid}),
    "lone surrogate in a key": lambda valid: json.dumps({"\udc00": valid}),
    "deep nesting": lambda valid: "[" * DEEP + "]" * DEEP,
    "4301-digit integer": lambda valid: "1" * 4301,
    "101-digit integer": lambda valid: "1" * 101,
    "NaN": lambda valid: "NaN",
}


def request(client, ctx, target, fragment):
    method, path, headers, body = TARGETS[target](ctx)
    field = next(k for k, v in body.items() if v == HOLE)
    raw = json.dumps(body).replace(json.dumps(HOLE), fragment(VALID[field])).encode()
    headers = {**(headers or {}), "Content-Type": "application/json"}
    if target == "signed push":
        headers |= {"X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()),
                    "X-Hub-Signature-256": "sha256=" + hmac.new(
                        ctx.push_secret.encode(), raw, hashlib.sha256).hexdigest()}
    return getattr(client, method)(path, data=raw, headers=headers)


def assert_refused(r, status=400, code="bad_request"):
    assert r.status_code == status, (r.status_code, r.get_data(as_text=True))
    assert set(r.json) == {"error", "message"} and r.json["error"] == code, r.json
    assert isinstance(r.json["message"], str) and r.json["message"]


@pytest.mark.parametrize("target", TARGETS)
def test_the_valid_body_is_accepted(client, ctx, target):
    """The bodies below differ from these only in the hostile value."""
    r = request(client, ctx, target, json.dumps)
    assert r.status_code in (200, 201, 202), r.json


@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("target", TARGETS)
def test_hostile_body_is_400_and_changes_nothing(client, ctx, target, hostile):
    before = snapshot()
    r = request(client, ctx, target, HOSTILE[hostile])
    assert_refused(r, code="invalid_payload" if target == "signed push" else "bad_request")
    assert snapshot() == before


def test_messages_say_what_and_where(client, ctx):
    r = request(client, ctx, "project patch", HOSTILE["NUL"])
    assert r.json["message"].startswith("name: ")
    r = request(client, ctx, "environment create",
                lambda valid: json.dumps({"x": [valid, "\ud800"]}))
    assert r.json["message"].startswith("name.x[1]: ")
    r = request(client, ctx, "project patch", HOSTILE["deep nesting"])
    assert "64" in r.json["message"]
    r = request(client, ctx, "project patch", HOSTILE["4301-digit integer"])
    assert "100" in r.json["message"]


def test_a_surrogate_pair_is_text_like_any_other(client, ctx):
    r = request(client, ctx, "project patch", lambda valid: json.dumps("proj \U0001F680"))
    assert r.status_code == 200 and r.json["name"] == "proj \U0001F680"


def test_an_integer_field_with_a_huge_literal(client, ctx):
    before = snapshot()
    r = client.post(f"{P}/projects/{ctx.project.id}/environments",
                    headers={**ctx.key, "Content-Type": "application/json"},
                    data='{"name": "qa", "ram_mb": ' + "9" * 4301 + "}")
    assert_refused(r)
    assert snapshot() == before


@pytest.mark.parametrize("query", ["status=a%00", "a%00=1", "status=%00&status=running"])
def test_nul_in_a_query_string_is_400(client, ctx, query):
    r = client.get(f"{P}/projects/{ctx.project.id}/environments?{query}", headers=ctx.key)
    assert_refused(r)
    r = client.get(f"{V1}/deployments?{query}", headers=ctx.user)
    assert_refused(r)
    before = snapshot()
    r = client.post(f"{V1}/environments/{ctx.env.id}/deploy?{query}", headers=ctx.user, json={})
    assert_refused(r)
    assert snapshot() == before


def test_nul_in_a_header_that_reaches_the_database_is_400(client, ctx):
    before = snapshot()
    r = client.post(f"{P}/projects", json={"name": "p", "server_id": str(ctx.server.id)},
                    headers={**ctx.key, "X-Idempotency-Key": "k\x00"})
    assert_refused(r)
    body = json.dumps({"ref": "refs/heads/main", "after": SHA,
                       "repository": {"full_name": "acme/erp"}, "commits": []}).encode()
    r = client.post(f"{V1}/webhooks/github", data=body, headers={
        "Content-Type": "application/json", "X-GitHub-Event": "push",
        "X-GitHub-Delivery": "d\x00", "X-Hub-Signature-256": "sha256=" + hmac.new(
            ctx.push_secret.encode(), body, hashlib.sha256).hexdigest()})
    assert_refused(r)
    assert snapshot() == before


# --- booleans are JSON booleans -------------------------------------------------

LOOSE = ["yes", "true", 1, 0, "false", "on"]


@pytest.mark.parametrize("value", LOOSE)
def test_loose_booleans_are_422(client, ctx, value):
    before = snapshot()
    for method, path, headers, body in (
        ("patch", f"{V1}/projects/{ctx.project.id}/environments/{ctx.env.id}", ctx.user,
         {"auto_deploy": value}),
        ("post", f"{V1}/environments/{ctx.env.id}/deploy", ctx.user, {"force": value}),
        ("post", f"{P}/webhooks", ctx.key, {"url": "https://hooks.example.com/c",
                                            "events": ["deploy.failed"], "is_active": value}),
        ("patch", f"{P}/webhooks/{ctx.webhook.id}", ctx.key, {"is_active": value}),
    ):
        r = getattr(client, method)(path, headers=headers, json=body)
        assert r.status_code == 422 and r.json["error"] == "validation_error", (path, r.json)
        assert "Not a valid boolean" in r.json["message"]
    assert snapshot() == before


def test_json_booleans_are_accepted(client, ctx):
    url = f"{V1}/projects/{ctx.project.id}/environments/{ctx.env.id}"
    for value in (False, True):
        r = client.patch(url, headers=ctx.user, json={"auto_deploy": value})
        assert r.status_code == 200 and r.json["auto_deploy"] is value


@pytest.mark.parametrize("value", ["yes", "1", "True", "on", ""])
def test_a_query_flag_is_exactly_true_or_false(client, ctx, value):
    before = snapshot()
    r = client.delete(f"{V1}/deployments/environment/{ctx.env.id}/destroy?delete_data={value}",
                      headers=ctx.user)
    assert r.status_code == 422 and r.json["error"] == "validation_error", r.json
    assert snapshot() == before


# --- the admin CLI ----------------------------------------------------------------

BERTH = str(Path(sys.executable).parent / "berth")


def test_cli_refuses_a_name_it_cannot_store(tmp_path):
    """Bytes that are not UTF-8 reach Python as lone surrogates (a NUL cannot be
    passed in argv at all)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CP_")}
    env["CP_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.run([BERTH.encode(), b"admin", b"org", b"create", b"--name", b"acme\xff"],
                          env=env, capture_output=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == b"" and b"Traceback" not in proc.stderr
    assert proc.stderr.startswith(b"error: ") and b"--name" in proc.stderr
    proc = subprocess.run([BERTH, "admin", "org", "create", "--name", "acme"],
                          env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# --- over a real socket -------------------------------------------------------------

def test_served_process_refuses_hostile_bodies_and_query(tmp_path):
    """The real `berth serve`: the bytes as a client sends them, same answers."""
    import requests

    from tests.support.serve import Served

    served = Served(tmp_path / "data")
    boot = served.admin("bootstrap")
    served.start()
    try:
        h = {"Authorization": f"Bearer {boot['key']}", "Content-Type": "application/json"}
        server = served.admin("server", "create", "--name", "s", "--provider", "p",
                              "--cpu-cores", "2", "--ram-mb", "2048", "--disk-gb", "20",
                              "--org", boot["organization_id"])["id"]
        url = served.url + P + "/projects"
        for body in (json.dumps({"name": "a\x00", "server_id": server}),
                     json.dumps({"name": "a\ud800", "server_id": server}),
                     '{"name": ' + "[" * DEEP + "]" * DEEP + "}",
                     '{"name": ' + "1" * 4301 + "}"):
            r = requests.post(url, data=body.encode(), headers=h, timeout=10)
            assert r.status_code == 400 and set(r.json()) == {"error", "message"}, r.text
        r = requests.get(url + "?cursor=%00", headers=h, timeout=10)
        assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text
        r = requests.get(url, headers=h, timeout=10)
        assert r.json()["pagination"]["total"] == 0
    finally:
        log = served.stop()
    assert "Traceback" not in log
