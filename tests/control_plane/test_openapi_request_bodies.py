"""Request bodies in the served OpenAPI documents: `required` exactly when the
server refuses an empty request (a field required, or one of a `oneOf`'s); a body whose fields all have defaults may be
left out, an empty request being the empty object."""

import re
import uuid

import pytest

from control_plane.models import BackupImport, Environment
from tests.control_plane.backups import conftest as backups

V1 = backups.V1
bk, store = backups.bk, backups.store  # the backup tests' stand (fixtures)
DOCS = {"public": f"{backups.P}/openapi.json", "ops": f"{V1}/openapi.json"}


@pytest.fixture
def docs(client):
    return {name: client.get(url).json for name, url in DOCS.items()}


def _bodies(spec):
    """(path, method, requestBody, its schema) of each operation that takes a body."""
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if method != "parameters" and "requestBody" in op:
                body = op["requestBody"]["content"]["application/json"]["schema"]
                if "$ref" in body:
                    body = spec["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
                yield path, method, op["requestBody"], body


def _required(body):
    """The fields a body needs: its `required`, or those of its `oneOf` branches (one
    of them) when each branch requires some."""
    branches = body.get("oneOf") or []
    if not body.get("required") and branches and all(b.get("required") for b in branches):
        return {field for b in branches for field in b["required"]}
    return set(body.get("required") or ())


def test_a_body_is_required_exactly_when_its_schema_requires_a_field(docs):
    for name, spec in docs.items():
        for path, method, request_body, body in _bodies(spec):
            assert request_body.get("required", False) == bool(_required(body)), (
                name, method, path)


def test_an_empty_request_to_a_required_body_is_a_422_naming_the_fields(client, world, bk,
                                                                          docs):
    key = {"Authorization": "Bearer " + world.key(bk.org, server_registration=True)[0]}
    for name, spec in docs.items():
        for path, method, request_body, body in _bodies(spec):
            if not request_body.get("required") or path.endswith("{git_provider}"):
                continue  # a Git push is signed, not sent with a token: its own tests
            url = re.sub(r"\{[a-z_]+\}", str(uuid.uuid4()), path)
            r = client.open(url, method=method.upper(),
                            headers=key if name == "public" else bk.h)
            assert r.status_code == 422 and r.json["error"] == "validation_error", (path, r.json)
            assert set(r.json["details"]["json"]) == _required(body), (path, r.json)


def test_an_empty_request_to_an_all_optional_body_is_served(app, client, bk, store):
    env = f"{V1}/environments/{bk.env.id}"
    r = client.patch(f"{env}/config", headers=bk.h)
    assert r.status_code == 200 and r.json["deployment"] is None, r.json  # nothing changed
    r = client.put(f"{env}/backup-policy", headers=bk.h)
    assert r.status_code == 200 and r.json["keep_daily"] == 7, r.json
    r = client.post(f"{env}/imports", headers=bk.h)
    assert r.status_code == 201 and r.json["filename"] is None, r.json
    assert BackupImport.get_by_id(r.json["import_id"]).environment_id == bk.env.id
    r = client.post(f"{env}/backups", headers=bk.h)
    assert r.status_code == 202 and r.json["backup_type"] == "manual", r.json
    assert Environment.get_by_id(bk.env.id).config_updated_at is None
