"""`st run --checks all` against a real `berth serve`, on both surfaces and both
databases: the OpenAPI documents say what the server does, and the server keeps
to them (no 500, every status, header and body declared, valid input accepted,
invalid input refused, no request served without credentials).

Real ids of an organization's resources are offered to the fuzzer half of the
time (schemathesis dictionaries), so operations reach their views rather than
only 404; DELETEs get none, so they do not remove what the others test.

Nothing is left out of the checks: NULs are drawn (the string patterns exclude
them), idempotency keys are shared between operations (rule 5's replays), every
status must be one its operation lists (schemathesis_hooks.py: a `default`
response does not count), and a configuration the document allows is refused only
for a policy it cannot state (POLICY_422, checked by the hooks)."""

import datetime as dt
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

from tests.support.serve import Served

ST = str(Path(sys.executable).with_name("st"))
HOOKS_DIR = str(Path(__file__).parent)
MAX_EXAMPLES = 12
SEED = 20261123

# A syntactically valid cursor that this list did not sign is a 400
# `invalid_cursor`, and so is a state the spec forbids an action in (retry of a
# deployment that did not fail, rule 2; cancel, rule 3; rollback, rule 5), and
# the completion of an import naming parts that were not uploaded
# (`invalid_part`): a schema cannot say which ids are in which state. Everything
# else valid is 2xx (or 401/403/404/409/429, which schemathesis allows).
ACCEPTED_400 = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]
STATEFUL_400 = (r"^/api/v1/deployments/\{deployment_id\}/(retry|cancel|rollback)$"
                r"|^/api/v1/environments/\{env_id\}/imports/\{import_id\}/complete$"
                r"|^/api/(public/)?v1/(projects|support/tickets|deployments)$|^/api/v1/servers$"
                r"|^/api/public/v1/automation-rules/\{rule_id\}/runs$|^/api/public/v1/audit-events$"
                r"|^/api/public/v1/projects/\{project_id\}/builds$")
# Policies no schema states: which well-formed host names are reserved (`.test`,
# `example.com`, the apps domain...), so a new domain may be a 422
# `invalid_domain`; which variable names are reserved or look like credentials
# and which options go together, so a configuration may be a 422
# `invalid_configuration` (only for those: schemathesis_hooks.policy_refusals_are_policy).
# Which https URLs a webhook may point at (`invalid_webhook_url`: hosts that do
# not parse, loopback and private addresses) is such a policy too, and so is what
# an automation rule may name (`invalid_automation_rule`: the project's own
# environments, a cron that fires, a time zone that exists; the rules' list, at the
# same path, may answer a 400 `invalid_cursor` as the lists above do), and which
# strings are host names and public keys for an SSH server (`invalid_ssh_server`;
# the servers' list, at the same path, may answer a 400 `invalid_cursor`). A range
# of metric history relates its parameters: `from` before `to`, at most 90 days, at
# most 1,500 points of its step, minutes only while they are kept. An environment
# may ask for more than the server its project is on has (`exceeds_server_capacity`):
# a server the run itself registers has no cores until its agent reports them.
# A notification channel's settings are one object whose fields depend on its
# type (said in words), and an e-mail channel needs an SMTP server configured. A shell
# session runs a command or `odoo shell`, not both (said in words).
POLICY_422 = (r"^/api/v1/environments/\{env_id\}/(domains|config)$"
              r"|^/api/public/v1/projects/\{project_id\}/environments$"
              r"|^/api/public/v1/(servers|environments)/\{[a-z_]+\}/metrics/history$"
              r"|^/api/public/v1/webhooks(/\{webhook_id\})?$"
              r"|^/api/public/v1/notification-channels(/\{channel_id\})?$"
              r"|^/api/public/v1/servers$"
              r"|^/api/public/v1/environments/\{env_id\}/shell-sessions$"
              r"|^/api/public/v1/(projects/\{project_id\}/)?automation-rules(/\{rule_id\})?$")
ACCEPTED_422 = ACCEPTED_400 + ["422"]
# No agent is connected in this test: live reads (caught mails too) and destroys
# answer their documented 502 / 504 (the server or its agent did not answer). 500 stays a failure.
LIVE = (r"^/api/public/v1/(servers|environments)/\{[a-z_]+\}/(metrics|runtime-logs)$"
        r"|^/api/public/v1/environments/\{env_id\}/mails(/\{mail_id\})?$"
        r"|^/api/v1/deployments/environment/\{environment_id\}/destroy$")
GATEWAY_ERRORS = ["2xx", "3xx", "4xx", "502", "504"]


def _toml(value):
    return json.dumps(value)  # TOML basic strings and arrays of them are JSON's


def _config(ids):
    lines = []
    for name, values in ids.items():
        lines += [f"[dictionaries.{name}]", f"values = {_toml(values)}", ""]
    bindings = ", ".join(f'"path.{name}" = {{ dictionary = "{name}", probability = 0.5 }}'
                         for name in ids)
    lines += ["[[operations]]", 'include-method-regex = "^(GET|POST|PATCH|PUT)$"',
              f"parameters = {{ {bindings} }}", "",
              "[[operations]]", f"include-path-regex = {_toml(STATEFUL_400)}",
              f"checks.positive_data_acceptance.expected-statuses = {_toml(ACCEPTED_400)}", "",
              "[[operations]]", f"include-path-regex = {_toml(POLICY_422)}",
              f"checks.positive_data_acceptance.expected-statuses = {_toml(ACCEPTED_422)}", "",
              "[[operations]]", f"include-path-regex = {_toml(LIVE)}",
              f"checks.not_a_server_error.expected-statuses = {_toml(GATEWAY_ERRORS)}", ""]
    return "\n".join(lines)


@pytest.fixture
def live(backend, tmp_path, request):
    env = {"CP_WEBHOOK_TIMEOUT_SECONDS": "2", "CP_DNS_TIMEOUT": "2",
           "CP_DNS_RESOLVER": request.getfixturevalue("loopback_dns").address}
    if backend == "postgres":
        env["CP_DATABASE_URL"] = request.getfixturevalue("postgres").create_database(
            f"berth_st_{uuid.uuid4().hex[:12]}")
    served = Served(tmp_path / "data", env)
    boot = served.admin("bootstrap")
    org = boot["organization_id"]
    server, ticket, tokens, read_keys, write_keys = _seeded(served, org)
    served.start()
    key = {"Authorization": f"Bearer {boot['key']}"}
    api = served.url + "/api/public/v1"

    def post(path, body):
        r = requests.post(api + path, json=body, headers=key, timeout=30)
        assert r.status_code == 201, r.text
        return r.json()

    project = post("/projects", {"name": "p", "server_id": server})
    env_ = post(f"/projects/{project['id']}/environments", {"name": "e"})
    webhook = post("/webhooks", {"url": "https://hooks.example.com/berth",
                                 "events": ["deploy.failed"]})
    token = post("/servers/registration-tokens", {})
    rule = post(f"/projects/{project['id']}/automation-rules", {
        "name": "r", "trigger": {"type": "git_push", "branch": "main"},
        "action": {"type": "deploy", "environment_id": env_["id"]}})
    task = requests.get(f"{api}/environments/{env_['id']}/logs", headers=key,
                        timeout=30).json()["task_id"]
    ids = {"project_id": [project["id"]], "env_id": [env_["id"]], "environment_id": [env_["id"]],
           "server_id": [server], "ticket_id": [ticket],
           "webhook_id": [webhook["id"]], "token_id": [token["token_id"]],
           "task_id": [task], "deployment_id": [task], "rule_id": [rule["id"]]}
    (tmp_path / "schemathesis.toml").write_text(_config(ids))
    files = {}
    for name, values in (("read", read_keys), ("write", write_keys), ("tokens", tokens)):
        files[name] = tmp_path / f"{name}.keys"
        files[name].write_text("\n".join(values))
    served.fuzz_files, served.fuzz_dir = files, tmp_path
    yield served
    served.stop()


def _seeded(served, org):
    """The rest of what the fuzzer needs, made through the services `berth admin` calls
    on the same database (a process each took some 30 s of every run's setup): a
    server, a ticket, a release, user tokens, and enough keys that the fuzzer stays
    mostly under the fixed per-key limits. Returns (server id, ticket id, user tokens,
    read-only keys, full-access keys)."""
    from control_plane.app import create_app
    from control_plane.services.accounts import keys, orgs
    from control_plane.services.servers import servers
    from control_plane.services.support import releases, tickets

    app = create_app({"DATA_DIR": served.env["CP_DATA_DIR"],
                      "DATABASE_URL": served.env.get("CP_DATABASE_URL") or None})
    expires = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(days=1)

    def make(key_type, n):
        return [keys.create_key(org, f"{key_type}{i}", key_type, "organization",
                                expires_at=expires, server_registration=True,
                                support_tickets=True)[1] for i in range(n)]

    with app.extensions["berth"].db.connection_context():
        # As large as an environment may ask for: an environment larger than its server
        # is a 422 `exceeds_server_capacity`, a limit of the server, not of the schema.
        server = servers.create_server(name="s1", provider="p", cpu_cores=1024,
                                       ram_mb=4194304, disk_gb=1000000, org_id=org)
        user = orgs.create_user(org, "u", "u@example.com", ("project.environments.deploy",
                                                            "project.deployments.cancel"))
        ticket = tickets.create_ticket(org_id=org, subject="s", description="d")
        releases.add_release(version="1.2.3", date="2026-01-02", title="t", highlights=("h",),
                             categories={"added": ("x",), "changed": (), "improved": (),
                                         "fixed": ()})
        tokens = [orgs.issue_user_token(user.id) for _ in range(4)]
        return (str(server.id), str(ticket.id), tokens, make("read_only", 30),
                make("full_access", 200))


def _st(served, surface):
    files = served.fuzz_files
    reads, writes = ((files["read"], files["write"]) if surface == "public"
                     else (files["tokens"], files["tokens"]))
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
           "PYTHONPATH": HOOKS_DIR, "BERTH_FUZZ_READ_KEYS": str(reads),
           "BERTH_FUZZ_WRITE_KEYS": str(writes)}
    path = "/api/public/v1/openapi.json" if surface == "public" else "/api/v1/openapi.json"
    return subprocess.run(
        [ST, "--config-file", str(served.fuzz_dir / "schemathesis.toml"), "run",
         served.url + path, "--checks", "all", "--max-examples", str(MAX_EXAMPLES),
         "--seed", str(SEED), "--generation-database", "none", "--no-color",
         "--request-timeout", "30", "--generation-codec", "utf-8"],
        env=env, cwd=served.fuzz_dir, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
@pytest.mark.parametrize("surface", ["public", "ops"])
def test_schemathesis_checks_all_pass_against_berth_serve(live, surface):
    result = _st(live, surface)
    print(result.stdout[-6000:])  # the summary: phases, warnings (shown with -s)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-3000:]


@pytest.mark.slow  # each starts a berth serve
def test_idempotent_replay_of_another_operation_is_documented(live):
    """Rule 5: an action given the key of an earlier project creation answers that
    201 (replayed), which the action's document declares, body and headers."""
    import schemathesis

    key = {"Authorization": f"Bearer {live.fuzz_files['write'].read_text().split()[0]}",
           "X-Idempotency-Key": f"replay-{uuid.uuid4()}"}
    api = live.url + "/api/public/v1"
    server_id = requests.get(api + "/servers", headers=key, timeout=10).json()["data"][0]["id"]
    created = requests.post(api + "/projects", json={"name": "r", "server_id": server_id},
                            headers=key, timeout=10)
    first = requests.get(api + "/projects", headers=key, timeout=10).json()["data"][0]["id"]
    envs = requests.get(f"{api}/projects/{first}/environments", headers=key, timeout=10)
    action = requests.post(f"{api}/environments/{envs.json()[0]['id']}/actions/restart",
                           headers=key, timeout=10)
    assert created.status_code == 201 and action.status_code == 201, action.text
    assert action.headers["X-Idempotency-Replayed"] == "true"
    assert action.json() == created.json()
    # A create given the same key answers the project's 201 too: its document says so.
    webhook = requests.post(api + "/webhooks", json={"url": "https://hooks.example.com/x",
                                                      "events": ["deploy.failed"]},
                            headers=key, timeout=10)
    assert webhook.status_code == 201 and webhook.json() == created.json(), webhook.text
    schema = schemathesis.openapi.from_url(api + "/openapi.json")
    operation = schema["/api/public/v1/environments/{env_id}/actions/{action}"]["POST"]
    assert "201" in operation.definition.raw["responses"]
    operation.validate_response(action)
    schema["/api/public/v1/webhooks"]["POST"].validate_response(webhook)


@pytest.mark.slow
def test_text_the_server_refuses_is_a_documented_400(live):
    """A NUL or an unpaired surrogate anywhere in a body is a 400 (decisions: hostile
    input). The fuzzer draws NULs, which the string patterns exclude; surrogates it
    cannot draw (the run is UTF-8), so here each is sent by hand: the answer is the
    400 each operation declares, and the patterns refuse the NUL."""
    import schemathesis

    writer = {"Authorization": f"Bearer {live.fuzz_files['write'].read_text().split()[1]}",
              "Content-Type": "application/json"}
    api = live.url + "/api/public/v1"
    schema = schemathesis.openapi.from_url(api + "/openapi.json")
    operation = schema["/api/public/v1/projects"]["POST"]
    name = operation.definition.raw["requestBody"]["content"]["application/json"]["schema"]
    for text in ('"a\\u0000b"', '"a\\ud800b"'):
        r = requests.post(api + "/projects", data=f'{{"name": {text}, "server_id": "x"}}',
                          headers=writer, timeout=10)
        assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text
        operation.validate_response(r)
    pattern = schema.raw_schema["components"]["schemas"]["ProjectCreate"]["properties"]["name"]
    assert name and re.search(pattern["pattern"], "a\x00b") is None
    assert re.search(pattern["pattern"], "a b")
