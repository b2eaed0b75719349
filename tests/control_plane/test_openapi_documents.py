"""The served OpenAPI documents say what the server answers: idempotent creates
document their own body (and, rule 5, every other idempotent create's), a list's
items are the documented schema, and no response is a union of unrelated
schemas nor two schemas one name."""

import warnings

import pytest
import schemathesis

from tests.control_plane.backups import conftest as backups

P, V1 = backups.P, backups.V1
bk = backups.bk  # the backup tests' stand (a fixture)
DOCS = {"public": f"{P}/openapi.json", "ops": f"{V1}/openapi.json"}


def _ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


def _operations(spec):
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if method != "parameters":
                yield path, method, op


@pytest.fixture
def docs(client):
    return {name: client.get(url).json for name, url in DOCS.items()}


# --- idempotent creates (rule 5) ----------------------------------------------------

OWN_201 = {  # what each idempotent POST answers on a first request
    "/api/public/v1/projects": "Project",
    "/api/public/v1/projects/{project_id}/environments": "Environment",
    "/api/public/v1/webhooks": "WebhookCreated",
    "/api/public/v1/notification-channels": "NotificationChannel",
    "/api/public/v1/projects/{project_id}/automation-rules": "AutomationRule",
    "/api/public/v1/automation-rules/{rule_id}/run": "AutomationRun",
    "/api/public/v1/environments/{env_id}/actions/{action}": None,  # its own is a 202
}


def test_an_idempotent_201_is_its_own_body_or_any_other_idempotent_create(docs):
    paths = docs["public"]["paths"]
    every = [_ref(name) for name in OWN_201.values() if name]
    for path, own in OWN_201.items():
        schema = paths[path]["post"]["responses"]["201"]["content"]["application/json"]["schema"]
        assert sorted(schema["anyOf"], key=str) == sorted(every, key=str), path
        if own:
            assert schema["anyOf"][0] == _ref(own), path  # its own body first
        description = paths[path]["post"]["responses"]["201"]["description"]
        assert description.count("eplayed (idempotency rule 5)") == 1, description
    assert "x-replayed-create" not in str(docs["public"])  # the marker is replaced


def test_no_response_is_a_union_of_unrelated_schemas(docs):
    """Beyond rule 5's replays, an anyOf in a response is a nullable object only."""
    for name, spec in docs.items():
        for path, method, op in _operations(spec):
            for status, response in op["responses"].items():
                schema = (response.get("content") or {}).get("application/json", {}).get("schema")
                refs = [b for b in (schema or {}).get("anyOf", ()) if "$ref" in b]
                if len(refs) > 1:
                    assert name == "public" and status == "201" and path in OWN_201, (
                        name, method, path, status, refs)


def test_no_two_schemas_share_a_name(client):
    """apispec renames a second schema of a name (`Rule1`) with a warning: the
    documents, written when first read, are written without one."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for url in DOCS.values():
            assert client.get(url).status_code == 200
    assert not [w for w in caught if "Multiple schemas resolved" in str(w.message)]


# --- what the automation operations answer ------------------------------------------

def _documented(app, doc):
    return schemathesis.openapi.from_wsgi(DOCS[doc], app)


def test_rule_create_list_and_run_answer_what_the_document_says(app, client, bk):
    schema = _documented(app, "public")
    rules = f"{P}/projects/{bk.project.id}/automation-rules"
    body = {"name": "on push", "trigger": {"type": "git_push", "branch": "main"},
            "action": {"type": "deploy", "environment_id": str(bk.env.id)}}
    created = client.post(rules, headers=bk.key, json=body)
    assert created.status_code == 201, created.json
    schema["/api/public/v1/projects/{project_id}/automation-rules"]["POST"].validate_response(
        created)
    listed = client.get(rules, headers=bk.key)
    schema["/api/public/v1/projects/{project_id}/automation-rules"]["GET"].validate_response(
        listed)
    read = client.get(f"{P}/automation-rules/{created.json['id']}", headers=bk.key).json
    assert listed.json["data"] == [read]  # a listed rule is the rule as read
    assert read["project_id"] == str(bk.project.id)
    run = client.post(f"{P}/automation-rules/{created.json['id']}/run", headers=bk.key)
    assert run.status_code == 201, run.json
    schema["/api/public/v1/automation-rules/{rule_id}/run"]["POST"].validate_response(run)
