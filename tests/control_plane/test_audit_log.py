"""The audit log through both APIs: each write is one event with its actor, where
it came from and what was asked, never a secret; GET /audit-events filters and
pages it for organization-scoped keys; events past their retention go."""

import datetime as dt
import json

import pytest

from control_plane.infra import clock
from control_plane.models import AuditEvent, Deployment
from control_plane.services import housekeeping
from tests.conftest import auth

P, OPS = "/api/public/v1", "/api/v1"


def _events(client, raw, **query):
    r = client.get(f"{P}/audit-events", headers=auth(raw), query_string=query)
    assert r.status_code == 200, r.json
    return r.json


def _stored():
    """Every audit event as stored, as text: what must not hold a secret."""
    return json.dumps([list(row) for row in AuditEvent.select().tuples()], default=str)


def test_each_public_write_is_one_event_of_its_key_without_secrets(client, world):
    org = world.org()
    server = world.server(org)
    raw, key = world.key(org, server_registration=True)
    reader, _ = world.key(org, "read_only")
    h = auth(raw)

    project = client.post(f"{P}/projects", headers=h, json={
        "name": "Shop", "server_id": str(server.id)}).json
    assert client.patch(f"{P}/projects/{project['id']}", headers=h,
                        json={"name": "Shop 2"}).status_code == 200
    env = client.post(f"{P}/projects/{project['id']}/environments", headers=h,
                      json={"name": "Production"}).json
    hook = client.post(f"{P}/webhooks", headers=h, json={
        "url": "https://hooks.example.com/berth", "events": ["deploy.failed"]}).json
    rotated = client.post(f"{P}/webhooks/{hook['id']}/rotate-secret", headers=h).json
    assert client.delete(f"{P}/webhooks/{hook['id']}", headers=h).status_code == 204
    token = client.post(f"{P}/servers/registration-tokens", headers=h, json={}).json
    assert client.delete(f"{P}/servers/registration-tokens/{token['token_id']}",
                         headers=h).status_code in (200, 204)
    spare = client.post(f"{P}/projects", headers=h, json={
        "name": "Spare", "server_id": str(server.id)}).json
    assert client.delete(f"{P}/projects/{spare['id']}", headers={
        **h, "X-Confirm-Delete": "true"}).status_code in (200, 204)
    # Reads and refused writes are not events.
    client.get(f"{P}/projects", headers=h)
    assert client.patch(f"{P}/projects/{project['id']}", headers=h,
                        json={"name": ""}).status_code == 422

    listed = _events(client, reader, limit=100)
    events = listed["data"]
    assert [e["action"] for e in reversed(events)] == [
        "project.create", "project.update", "environment.create", "webhook.create",
        "webhook.rotate_secret", "webhook.delete", "registration_token.create",
        "registration_token.revoke", "project.create", "project.delete"]
    assert listed["pagination"]["total"] == 10
    for event in events:
        assert event["actor"] == {"type": "api_key", "id": key.public_id, "name": key.name}
        assert event["source_ip"] == "127.0.0.1" and event["request_id"]
    update = events[-2]
    assert update["target_type"] == "project" and update["target_id"] == project["id"]
    assert update["changes"] == {"name": "Shop 2"}
    created = events[-3]
    assert created["target_id"] == env["id"] and created["changes"]["name"] == "Production"
    stored = _stored() + json.dumps(listed)
    for secret in (raw, hook["secret"], rotated["secret"], token["token"]):
        assert secret not in stored


def test_operations_writes_are_the_users_and_secret_values_stay_out(client, world):
    org = world.org()
    server = world.server(org)
    env = world.environment(world.project(org, server), "running")
    from control_plane.services.accounts import orgs

    user = world.user(org, ["project.environments.deploy", "project.deployments.cancel"])
    h = auth(orgs.issue_user_token(user.id))
    reader, _ = world.key(org, "read_only")

    r = client.patch(f"{OPS}/environments/{env.id}/config", headers=h, json={"variables": {
        "MAILER_PHRASE": {"value": "hunter2-never-shown", "secret": True},
        "SMTP_HOST": {"value": "mail.example.org"}}})
    assert r.status_code == 201, r.json  # with the redeploy it starts
    task = Deployment.get(Deployment.environment == env.id)
    assert client.post(f"{OPS}/deployments/{task.id}/cancel", headers=h).status_code == 200
    assert client.post(f"{OPS}/environments/{env.id}/domains", headers=h,
                       json={"domain": "erp.acme-audit.net"}).status_code == 201

    events = _events(client, reader)["data"]
    assert [e["action"] for e in reversed(events)] == [
        "configuration.update", "deployment.cancel", "domain.add"]
    for event in events:
        assert event["actor"] == {"type": "user", "id": str(user.id), "name": user.email}
    config = events[-1]["changes"]
    assert config["variables"]["MAILER_PHRASE"]["value"] == "[redacted]"
    assert config["variables"]["SMTP_HOST"]["value"] == "mail.example.org"
    assert config["task_id"] == str(task.id)
    assert "hunter2-never-shown" not in _stored()


def test_the_list_filters_pages_and_needs_an_organization_key(client, world):
    org = world.org()
    server = world.server(org)
    raw, key = world.key(org)
    reader, _ = world.key(org, "read_only")
    ids = [client.post(f"{P}/projects", headers=auth(raw), json={
        "name": f"p{i}", "server_id": str(server.id)}).json["id"] for i in range(3)]
    client.patch(f"{P}/projects/{ids[0]}", headers=auth(raw), json={"name": "renamed"})

    assert [e["action"] for e in _events(client, reader, target_id=ids[0])["data"]] == [
        "project.update", "project.create"]
    assert _events(client, reader, action="project.create")["pagination"]["total"] == 3
    # A family: every action starting `project.`; a prefix without the dot matches none.
    family = _events(client, reader, action="project.*")
    assert family["pagination"]["total"] == 4
    assert {e["action"] for e in family["data"]} == {"project.create", "project.update"}
    assert _events(client, reader, action="proj.*")["data"] == []
    assert _events(client, reader, action="project.*", target_id=ids[0])[
        "pagination"]["total"] == 2
    assert _events(client, reader, actor_id=key.public_id)["pagination"]["total"] == 4
    assert _events(client, reader, actor_type="user")["data"] == []
    first = _events(client, reader, limit=3)
    assert first["pagination"]["has_more"] is True
    rest = _events(client, reader, limit=3, cursor=first["pagination"]["next_cursor"])
    assert len(rest["data"]) == 1 and rest["pagination"]["has_more"] is False
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)).isoformat()
    assert _events(client, reader, **{"from": later})["data"] == []
    # Another organization sees none of it.
    assert _events(client, world.key(world.org(), "read_only")[0])["data"] == []

    scoped, _ = world.key(org, "read_only", scope="project",
                          project=world.project(org, server))
    r = client.get(f"{P}/audit-events", headers=auth(scoped))
    assert r.status_code == 403 and r.json["error"] == "org_scope_required"
    r = client.get(f"{P}/audit-events", headers=auth(reader),
                   query_string={"actor_type": "robot"})
    assert r.status_code == 422 and "actor_type" in r.json["details"]["query"]


def test_events_go_after_their_retention(client, world):
    org = world.org()
    raw, _ = world.key(org)
    client.post(f"{P}/projects", headers=auth(raw), json={
        "name": "p", "server_id": str(world.server(org).id)})
    later = clock.now() + dt.timedelta(days=91)
    clock.set_source(lambda: later)
    try:
        assert housekeeping.run(retention_days=120)["audit_events"] == 0
        assert housekeeping.run(retention_days=90)["audit_events"] == 1
    finally:
        clock.set_source(None)
    assert AuditEvent.select().count() == 0


@pytest.mark.parametrize("value, kept", [
    ({"password": "x"}, {"password": "[redacted]"}),
    ({"webhook_secret": "x", "name": "n"}, {"webhook_secret": "[redacted]", "name": "n"}),
    ({"variables": {"A": {"value": "v", "secret": True}}},
     {"variables": {"A": {"value": "[redacted]", "secret": True}}}),
])
def test_secrets_are_left_out_of_what_changed(value, kept):
    from control_plane.services import audit

    assert audit.redacted(value) == kept
