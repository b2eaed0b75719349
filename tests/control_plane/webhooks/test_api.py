"""Outgoing webhooks, public side: every endpoint through HTTP, its fields,
scope, limits, secrets and the test ping against a real HTTPS receiver."""

import base64
import datetime as dt
import re

import pytest

from control_plane.events import SUBSCRIBABLE
from control_plane.infra import secretbox
from control_plane.models import Event, IdempotencyRecord, Webhook, WebhookDelivery
from control_plane.services.webhooks import subscriptions as svc
from tests.conftest import auth, new_uuid
from tests.support.webhook_receiver import Receiver, https_receiver, trust_ca  # noqa: F401 - fixtures

P = "/api/public/v1"
URL = "https://hooks.example.com/berth"
SECRET_RE = re.compile(r"^whsec_[A-Za-z0-9+/]{43}=$")
FIELDS = {"id", "url", "events", "description", "project_id", "is_active", "format",
          "last_triggered_at", "failure_count", "created_at"}


@pytest.fixture
def org(world):
    return world.org()


class Keys:
    """Fresh full-access keys on demand (each allows 10 webhook mutations a minute)
    and one read-only key for reading."""

    def __init__(self, world, org, **kw):
        self.world, self.org, self.kw = world, org, kw
        self.ro = world.key(org, "read_only", **kw)[0]

    def rw(self):
        return self.world.key(self.org, **self.kw)[0]


@pytest.fixture
def keys(world, org):
    return Keys(world, org)


def create(client, raw, **body):
    body = {"url": URL, "events": ["deploy.completed"], **body}
    return client.post(f"{P}/webhooks", headers=auth(raw), json=body)


def row(org, project=None, **kw):
    """A webhook written directly (fast set-up for limits and lists)."""
    return Webhook.create(organization=org, project=project, url=kw.pop("url", URL),
                          events=kw.pop("events", ["deploy.failed"]),
                          secret_encrypted=secretbox.seal("whsec_x", "webhook-secret"), **kw)


def test_create_get_list_patch_delete(client, keys, org, world):
    project = world.project(org)
    raw = keys.rw()
    r = create(client, raw, url="https://hooks.example.com/a?x=1",
               events=["deploy.completed", "environment.created"], description="Ops channel",
               project_id=str(project.id), format="blocks")
    assert r.status_code == 201
    w = r.json
    assert set(w) == FIELDS | {"secret"}
    assert w["url"] == "https://hooks.example.com/a?x=1"
    assert w["events"] == ["deploy.completed", "environment.created"]
    assert w["description"] == "Ops channel" and w["project_id"] == str(project.id)
    assert w["is_active"] is True and w["format"] == "blocks"
    assert w["last_triggered_at"] is None and w["failure_count"] == 0
    assert w["created_at"].endswith("Z")
    assert SECRET_RE.match(w["secret"]) and len(base64.b64decode(w["secret"][6:])) == 32

    # Stored sealed, readable by the delivery side only through secret_of.
    stored = Webhook.get_by_id(w["id"])
    assert w["secret"] not in stored.secret_encrypted
    assert svc.secret_of(stored) == w["secret"]

    # Shown once: never in GET or the list.
    shown = {k: v for k, v in w.items() if k != "secret"}
    got = client.get(f"{P}/webhooks/{w['id']}", headers=auth(keys.ro))
    assert got.status_code == 200 and got.json == shown
    page = client.get(f"{P}/webhooks", headers=auth(keys.ro)).json
    assert page == {"items": [shown], "total": 1, "limit": 50, "offset": 0, "has_more": False}

    r = client.patch(f"{P}/webhooks/{w['id']}", headers=auth(raw), json={
        "url": "https://other.example.com/h", "events": ["deploy.failed"], "description": "",
        "format": "raw", "is_active": False})
    assert r.status_code == 200 and set(r.json) == FIELDS
    assert r.json["url"] == "https://other.example.com/h" and r.json["events"] == ["deploy.failed"]
    assert r.json["description"] == "" and r.json["format"] == "raw" and r.json["is_active"] is False
    assert r.json["project_id"] == str(project.id) and r.json["created_at"] == w["created_at"]
    r = client.patch(f"{P}/webhooks/{w['id']}", headers=auth(raw), json={"description": "kept"})
    assert r.json["events"] == ["deploy.failed"] and r.json["url"] == "https://other.example.com/h"
    assert client.patch(f"{P}/webhooks/{w['id']}", headers=auth(raw), json={}).status_code == 200

    r = client.delete(f"{P}/webhooks/{w['id']}", headers=auth(raw))
    assert r.status_code == 204 and r.data == b""
    assert client.get(f"{P}/webhooks/{w['id']}", headers=auth(keys.ro)).status_code == 404
    assert client.delete(f"{P}/webhooks/{w['id']}", headers=auth(raw)).status_code == 404
    assert Webhook.select().count() == 0


def test_defaults(client, keys):
    r = create(client, keys.rw())
    assert r.status_code == 201
    assert r.json["description"] == "" and r.json["format"] == "raw"
    assert r.json["is_active"] is True and r.json["project_id"] is None
    r = create(client, keys.rw(), is_active=False)
    assert r.json["is_active"] is False


def test_event_aliases_are_stored_under_the_deploy_names(client, keys):
    raw = keys.rw()
    r = create(client, raw, events=["deployment.completed", "deployment.failed",
                                    "deployment.started", "deployment.cancelled"])
    assert r.status_code == 201
    assert r.json["events"] == ["deploy.completed", "deploy.failed", "deploy.started",
                                "deploy.cancelled"]
    assert Webhook.get_by_id(r.json["id"]).events == r.json["events"]
    r = client.patch(f"{P}/webhooks/{r.json['id']}", headers=auth(raw),
                     json={"events": ["deployment.failed", "environment.deleted"]})
    assert r.json["events"] == ["deploy.failed", "environment.deleted"]


def test_every_spec_event_is_accepted(client, keys):
    names = list(SUBSCRIBABLE)
    for chunk in (names[i:i + 10] for i in range(0, len(names), 10)):  # at most 10 a webhook
        r = create(client, keys.rw(), events=chunk)
        assert r.status_code == 201 and r.json["events"] == chunk


@pytest.mark.parametrize("events, needle", [
    (["deploy.exploded"], "deploy.exploded"),
    ([], "events"),
    (["deploy.started"] * 2, "events"),
    (["deploy.completed", "deployment.completed"], "events"),  # the same event twice
    (list(SUBSCRIBABLE[:10]) + ["deployment.completed"], "events"),  # 11
    ("deploy.started", "events"),
    ([5], "events"),
])
def test_bad_events_are_422(client, keys, events, needle):
    r = create(client, keys.rw(), events=events)
    assert r.status_code == 422 and r.json["error"] == "validation_error"
    assert needle in r.json["message"]
    assert Webhook.select().count() == 0


def test_unknown_event_lists_the_accepted_names(client, keys):
    r = create(client, keys.rw(), events=["deploy.exploded"])
    for name in svc.ACCEPTED:
        assert name in r.json["message"]


@pytest.mark.parametrize("body, field", [
    ({"url": "http://hooks.example.com/x"}, "url"),
    ({"url": "ftp://hooks.example.com/x"}, "url"),
    ({"url": "not a url"}, "url"),
    ({"url": ""}, "url"),
    ({"url": "https://hooks.example.com/" + "a" * 2030}, "url"),  # 2056 characters
    ({"url": "https://10.0.0.5/hook"}, "url"),
    ({"url": "https://127.0.0.1:8443/hook"}, "url"),
    ({"url": "https://192.168.1.20/hook"}, "url"),
    ({"url": "https://169.254.169.254/latest"}, "url"),
    ({"url": "https://[::1]/hook"}, "url"),
    ({"url": None}, "url"),
    ({"description": "d" * 501}, "description"),
    ({"format": "xml"}, "format"),
    ({"project_id": "nope"}, "project_id"),
    ({"is_active": "maybe"}, "is_active"),
    ({"secret": "whsec_mine"}, "secret"),
    ({"unexpected": 1}, "unexpected"),
])
def test_create_validation_is_422_and_creates_nothing(client, keys, body, field):
    r = create(client, keys.rw(), **body)
    assert r.status_code == 422, r.json
    assert r.json["error"] in ("validation_error", "invalid_webhook_url")
    assert field in r.json["message"] or r.json["error"] == "invalid_webhook_url"
    assert Webhook.select().count() == 0


def test_private_literals_are_invalid_webhook_url(client, keys):
    raw = keys.rw()
    for url in ("https://10.1.2.3/x", "https://[fd00::1]/x", "http://hooks.example.com/x"):
        r = create(client, raw, url=url)
        assert r.status_code == 422 and r.json["error"] == "invalid_webhook_url", (url, r.json)
    w = create(client, raw).json
    r = client.patch(f"{P}/webhooks/{w['id']}", headers=auth(raw), json={"url": "https://10.0.0.1/"})
    assert r.status_code == 422 and r.json["error"] == "invalid_webhook_url"
    assert Webhook.get_by_id(w["id"]).url == URL


def test_limits_at_their_edge_are_accepted(client, keys):
    long_url = "https://hooks.example.com/" + "a" * (2048 - len("https://hooks.example.com/"))
    r = create(client, keys.rw(), url=long_url, description="d" * 500,
               events=list(SUBSCRIBABLE[:10]))  # the most a webhook takes
    assert r.status_code == 201 and r.json["url"] == long_url
    r = create(client, keys.rw(), url=long_url + "a")
    assert r.status_code == 422


@pytest.mark.parametrize("host, stored", [
    ("bücher.example", "xn--bcher-kva.example"),  # IDNA: 7 characters longer
    ("1.1", "1.0.0.1"),  # a legacy IPv4 spelling, written out
])
def test_the_stored_url_is_at_most_2048_characters_too(client, keys, org, host, stored):
    def url(h, path_length):
        return f"https://{h}/" + "a" * path_length

    longest = 2048 - len(f"https://{stored}/")  # the longest path that fits once stored
    sent = url(host, longest + len(stored) - len(host))
    assert len(sent) == 2048  # within the limit as sent, longer once normalized
    r = create(client, keys.rw(), url=sent)
    assert r.status_code == 422 and r.json["error"] == "invalid_webhook_url", r.json
    assert "2048" in r.json["message"] and Webhook.select().count() == 0
    w = row(org)
    r = client.patch(f"{P}/webhooks/{w.id}", headers=auth(keys.rw()), json={"url": sent})
    assert r.status_code == 422 and r.json["error"] == "invalid_webhook_url", r.json
    assert Webhook.get_by_id(w.id).url == URL
    # 2048 characters once normalized is accepted, and stored normalized.
    r = create(client, keys.rw(), url=url(host, longest))
    assert r.status_code == 201, r.json
    assert r.json["url"] == url(stored, longest) and len(r.json["url"]) == 2048


@pytest.mark.parametrize("body, field", [
    ({"events": []}, "events"), ({"events": ["nope"]}, "events"),
    ({"description": "d" * 501}, "description"), ({"format": "html"}, "format"),
    ({"is_active": None}, "is_active"), ({"url": "http://x.example.com"}, "url"),
    ({"project_id": new_uuid()}, "project_id"), ({"failure_count": 0}, "failure_count"),
])
def test_patch_validation_is_422_and_changes_nothing(client, keys, org, body, field):
    w = row(org)
    r = client.patch(f"{P}/webhooks/{w.id}", headers=auth(keys.rw()), json=body)
    assert r.status_code == 422
    assert field in r.json["message"] or r.json["error"] == "invalid_webhook_url"
    assert Webhook.get_by_id(w.id).events == ["deploy.failed"]


def test_hundred_webhooks_per_organization(client, keys, org, world):
    for _ in range(99):
        row(org)
    assert create(client, keys.rw()).status_code == 201
    r = create(client, keys.rw())
    assert r.status_code == 409 and r.json["error"] == "webhook_limit_reached"
    assert Webhook.select().count() == 100
    other = world.org()
    assert create(client, world.key(other)[0]).status_code == 201  # per organization
    # Deleting one frees a slot.
    raw = keys.rw()
    assert client.delete(f"{P}/webhooks/{Webhook.select().where(Webhook.organization == org).first().id}",
                         headers=auth(raw)).status_code == 204
    assert create(client, raw).status_code == 201


def test_the_limit_holds_under_concurrent_creates(app, keys, org):
    from concurrent.futures import ThreadPoolExecutor

    for _ in range(98):
        row(org)
    raws = [keys.rw() for _ in range(6)]

    def attempt(raw):
        return create(app.test_client(), raw).status_code

    with ThreadPoolExecutor(6) as pool:
        statuses = sorted(pool.map(attempt, raws))
    assert statuses == [201, 201, 409, 409, 409, 409]
    assert Webhook.select().where(Webhook.organization == org).count() == 100


def test_project_scoped_keys(client, world, org):
    mine, theirs = world.project(org), world.project(org)
    scoped = Keys(world, org, scope="project", project=mine)
    org_keys = Keys(world, org)

    r = create(client, scoped.rw())  # omitted: the key's own project
    assert r.status_code == 201 and r.json["project_id"] == str(mine.id)
    r = create(client, scoped.rw(), project_id=str(mine.id))
    assert r.status_code == 201
    r = create(client, scoped.rw(), project_id=str(theirs.id))
    assert r.status_code == 404 and r.json["error"] == "not_found"
    r = create(client, scoped.rw(), project_id=None)
    assert r.status_code == 403 and r.json["error"] == "org_scope_required"

    org_wide = create(client, org_keys.rw()).json
    other_project = create(client, org_keys.rw(), project_id=str(theirs.id)).json

    listed = client.get(f"{P}/webhooks", headers=auth(scoped.ro)).json
    assert listed["total"] == 2 and {w["project_id"] for w in listed["items"]} == {str(mine.id)}
    assert client.get(f"{P}/webhooks", headers=auth(org_keys.ro)).json["total"] == 4
    for hidden in (org_wide, other_project):
        assert client.get(f"{P}/webhooks/{hidden['id']}", headers=auth(scoped.ro)).status_code == 404
        raw = scoped.rw()
        for r in (client.patch(f"{P}/webhooks/{hidden['id']}", headers=auth(raw), json={}),
                  client.delete(f"{P}/webhooks/{hidden['id']}", headers=auth(raw)),
                  client.post(f"{P}/webhooks/{hidden['id']}/rotate-secret", headers=auth(raw)),
                  client.post(f"{P}/webhooks/{hidden['id']}/test", headers=auth(raw)),
                  client.get(f"{P}/webhooks/{hidden['id']}/deliveries", headers=auth(raw))):
            assert r.status_code == 404 and r.json["error"] == "not_found"
    assert Webhook.select().count() == 4


def test_other_organizations_and_projects_answer_404(client, world, org, keys):
    stranger = world.org()
    theirs = row(stranger)
    foreign_project = world.project(stranger)
    deleted = world.project(org)
    deleted.deleted_at = dt.datetime(2026, 1, 1)
    deleted.save()
    raw = keys.rw()
    for r in (client.get(f"{P}/webhooks/{theirs.id}", headers=auth(keys.ro)),
              client.get(f"{P}/webhooks/{theirs.id}/deliveries", headers=auth(keys.ro)),
              client.patch(f"{P}/webhooks/{theirs.id}", headers=auth(raw), json={"is_active": False}),
              client.post(f"{P}/webhooks/{theirs.id}/rotate-secret", headers=auth(raw)),
              client.post(f"{P}/webhooks/{theirs.id}/test", headers=auth(raw)),
              client.delete(f"{P}/webhooks/{theirs.id}", headers=auth(raw)),
              client.get(f"{P}/webhooks/{new_uuid()}", headers=auth(keys.ro)),
              create(client, raw, project_id=str(foreign_project.id)),
              create(client, raw, project_id=str(deleted.id)),
              create(client, raw, project_id=new_uuid())):
        assert r.status_code == 404 and r.json["error"] == "not_found"
    assert client.get(f"{P}/webhooks", headers=auth(keys.ro)).json["total"] == 0
    assert Webhook.get_by_id(theirs.id).is_active is True


def test_read_only_keys_read_but_never_change(client, keys, org):
    w = row(org)
    ro = keys.ro
    assert client.get(f"{P}/webhooks", headers=auth(ro)).status_code == 200
    assert client.get(f"{P}/webhooks/{w.id}", headers=auth(ro)).status_code == 200
    assert client.get(f"{P}/webhooks/{w.id}/deliveries", headers=auth(ro)).status_code == 200
    for r in (create(client, ro),
              client.patch(f"{P}/webhooks/{w.id}", headers=auth(ro), json={}),
              client.delete(f"{P}/webhooks/{w.id}", headers=auth(ro)),
              client.post(f"{P}/webhooks/{w.id}/test", headers=auth(ro)),
              client.post(f"{P}/webhooks/{w.id}/rotate-secret", headers=auth(ro)),
              client.post(f"{P}/webhooks/{w.id}/deliveries/{new_uuid()}/redeliver",
                          headers=auth(ro))):
        assert r.status_code == 403 and r.json["error"] == "write_access_required"
    assert client.get(f"{P}/webhooks").status_code == 401


def test_rotate_secret(client, keys):
    raw = keys.rw()
    w = create(client, raw).json
    r = client.post(f"{P}/webhooks/{w['id']}/rotate-secret", headers=auth(raw))
    assert r.status_code == 200 and set(r.json) == {"secret"}
    new = r.json["secret"]
    assert SECRET_RE.match(new) and new != w["secret"]
    stored = Webhook.get_by_id(w["id"])
    assert svc.secret_of(stored) == new  # the old one is gone at once
    assert secretbox.unseal(stored.secret_encrypted, "webhook-secret") != w["secret"]
    again = client.post(f"{P}/webhooks/{w['id']}/rotate-secret", headers=auth(raw)).json["secret"]
    assert again not in (new, w["secret"])
    assert "secret" not in client.get(f"{P}/webhooks/{w['id']}", headers=auth(keys.ro)).json


def test_reenabling_a_paused_webhook_resets_failure_count(client, keys, org):
    paused = row(org, is_active=False, failure_count=10)
    raw = keys.rw()
    r = client.patch(f"{P}/webhooks/{paused.id}", headers=auth(raw), json={"description": "x"})
    assert r.json["is_active"] is False and r.json["failure_count"] == 10
    r = client.patch(f"{P}/webhooks/{paused.id}", headers=auth(raw), json={"is_active": True})
    assert r.status_code == 200 and r.json["is_active"] is True and r.json["failure_count"] == 0
    assert Webhook.get_by_id(paused.id).failure_count == 0

    # On a webhook that is already active, `is_active: true` changes nothing.
    failing = row(org, failure_count=3)
    r = client.patch(f"{P}/webhooks/{failing.id}", headers=auth(raw), json={"is_active": True})
    assert r.json["failure_count"] == 3
    # Pausing by hand keeps the count.
    r = client.patch(f"{P}/webhooks/{failing.id}", headers=auth(raw), json={"is_active": False})
    assert r.json["is_active"] is False and r.json["failure_count"] == 3


def _deliveries(webhook, n, start):
    for i in range(n):
        event = Event.create(organization=webhook.organization_id,
                             name=["deploy.completed", "deploy.failed"][i % 2], data={"i": i})
        WebhookDelivery.create(webhook=webhook, event=event, status="delivered",
                               attempt_count=1, response_status=200, response_body="ok",
                               duration_ms=12, delivered_at=start + dt.timedelta(minutes=i, seconds=1),
                               created_at=start + dt.timedelta(minutes=i))


def test_delivery_log(client, keys, org):
    w, other = row(org), row(org)
    start = dt.datetime(2026, 3, 1, 12, 0)
    _deliveries(w, 55, start)
    _deliveries(other, 2, start)
    r = client.get(f"{P}/webhooks/{w.id}/deliveries", headers=auth(keys.ro))
    assert r.status_code == 200 and len(r.json) == 50
    first = r.json[0]
    assert set(first) == {"id", "event", "status", "attempt_count", "response_status",
                          "response_body", "error_reason", "duration_ms", "delivered_at",
                          "created_at"}
    assert first["created_at"] == "2026-03-01T12:54:00.000Z"  # newest first
    assert first["delivered_at"] == "2026-03-01T12:54:01.000Z"
    assert first["event"] == "deploy.completed" and first["status"] == "delivered"
    assert first["attempt_count"] == 1 and first["response_status"] == 200
    assert first["response_body"] == "ok" and first["error_reason"] is None
    assert first["duration_ms"] == 12
    assert r.json[1]["event"] == "deploy.failed"
    assert r.json[-1]["created_at"] == "2026-03-01T12:05:00.000Z"
    created = [d["created_at"] for d in r.json]
    assert created == sorted(created, reverse=True)
    assert client.get(f"{P}/webhooks/{row(org).id}/deliveries", headers=auth(keys.ro)).json == []


def test_delete_removes_the_delivery_history(client, keys, org):
    w, kept = row(org), row(org)
    _deliveries(w, 3, dt.datetime(2026, 3, 1))
    _deliveries(kept, 2, dt.datetime(2026, 3, 1))
    assert client.delete(f"{P}/webhooks/{w.id}", headers=auth(keys.rw())).status_code == 204
    assert WebhookDelivery.select().where(WebhookDelivery.webhook == w.id).count() == 0
    assert WebhookDelivery.select().where(WebhookDelivery.webhook == kept.id).count() == 2
    assert Event.select().count() == 5  # events are the outbox; other webhooks may need them


def test_list_pagination(client, keys, org):
    base = dt.datetime(2026, 2, 1)
    ids = [str(row(org, created_at=base + dt.timedelta(minutes=i)).id) for i in range(5)]
    ro = keys.ro

    def page(**q):
        return client.get(f"{P}/webhooks", headers=auth(ro), query_string=q)

    r = page()
    assert [w["id"] for w in r.json["items"]] == ids  # oldest first
    assert r.json["limit"] == 50 and r.json["offset"] == 0 and r.json["has_more"] is False
    r = page(limit=2).json
    assert [w["id"] for w in r["items"]] == ids[:2] and r["has_more"] is True and r["total"] == 5
    r = page(limit=2, offset=2).json
    assert [w["id"] for w in r["items"]] == ids[2:4] and r["has_more"] is True
    r = page(limit=2, offset=4).json
    assert [w["id"] for w in r["items"]] == ids[4:] and r["has_more"] is False
    r = page(offset=10).json
    assert r["items"] == [] and r["total"] == 5 and r["has_more"] is False
    assert page(limit=100).status_code == 200 and page(limit=1).status_code == 200
    for bad in ({"limit": 0}, {"limit": 101}, {"limit": -1}, {"offset": -1}, {"limit": "x"}):
        r = page(**bad)
        assert r.status_code == 422 and r.json["error"] == "validation_error", bad


def test_mutation_limit(client, keys, org, world):
    raw = keys.rw()
    w = create(client, raw).json  # 1
    for body in ({"description": "a"}, {"description": "b"}, {"is_active": False}):  # 2-4
        assert client.patch(f"{P}/webhooks/{w['id']}", headers=auth(raw), json=body).status_code == 200
    assert client.post(f"{P}/webhooks/{w['id']}/rotate-secret", headers=auth(raw)).status_code == 200  # 5
    assert create(client, raw, events=["nope"]).status_code == 422  # 6: refused ones count too
    for _ in range(4):  # 7-10
        assert create(client, raw).status_code == 201
    r = create(client, raw)
    assert r.status_code == 429 and r.json["error"] == "webhook_rate_limit"
    assert 1 <= r.json["retry_after"] <= 60 and r.headers["Retry-After"] == str(r.json["retry_after"])
    assert r.headers["X-API-Key-Id"]
    for r in (client.patch(f"{P}/webhooks/{w['id']}", headers=auth(raw), json={}),
              client.delete(f"{P}/webhooks/{w['id']}", headers=auth(raw)),
              client.post(f"{P}/webhooks/{w['id']}/test", headers=auth(raw)),
              client.post(f"{P}/webhooks/{w['id']}/rotate-secret", headers=auth(raw))):
        assert r.status_code == 429 and r.json["error"] == "webhook_rate_limit"
    assert Webhook.select().count() == 5
    # Reads are not webhook mutations; other keys have their own count.
    assert client.get(f"{P}/webhooks/{w['id']}", headers=auth(raw)).status_code == 200
    assert client.delete(f"{P}/webhooks/{w['id']}", headers=auth(keys.rw())).status_code == 204
    # Webhook mutations count toward the key's own limit (20 per 60 s) as well.
    r = client.get(f"{P}/webhooks", headers=auth(raw))
    assert int(r.headers["X-RateLimit-Remaining"]) == 20 - 17


def test_idempotent_create_is_replayed(client, keys):
    raw = keys.rw()
    headers = {**auth(raw), "X-Idempotency-Key": new_uuid()}
    body = {"url": URL, "events": ["deploy.started"]}
    first = client.post(f"{P}/webhooks", headers=headers, json=body)
    again = client.post(f"{P}/webhooks", headers=headers, json=body)
    assert first.status_code == again.status_code == 201
    assert again.json == first.json and again.headers["X-Idempotency-Replayed"] == "true"
    assert "X-Idempotency-Replayed" not in first.headers
    assert Webhook.select().count() == 1
    # The cached response holds the secret: it is stored sealed too.
    [record] = IdempotencyRecord.select()
    assert first.json["secret"] not in record.response_body
    # A refused create is replayed as well (rule 3): its key creates nothing later.
    headers2 = {**auth(raw), "X-Idempotency-Key": new_uuid()}
    refused = client.post(f"{P}/webhooks", headers=headers2, json={**body, "events": []})
    assert refused.status_code == 422
    again = client.post(f"{P}/webhooks", headers=headers2, json=body)
    assert again.status_code == 422 and again.data == refused.data
    assert Webhook.select().count() == 1


@pytest.fixture
def receiving(app, https_receiver, trust_ca):  # noqa: F811 - fixtures by name
    """The real HTTPS receiver, trusted and reachable (it listens on 127.0.0.1)."""
    settings = app.extensions["berth"].settings
    settings["WEBHOOK_ALLOW_PRIVATE"] = True
    settings["WEBHOOK_CA_BUNDLE"] = trust_ca
    return https_receiver


def test_ping_reaches_the_receiver_signed(client, keys, receiving):
    raw = keys.rw()
    w = create(client, raw, url=receiving.url + "/hooks/in").json
    r = client.post(f"{P}/webhooks/{w['id']}/test", headers=auth(raw))
    assert r.status_code == 200
    assert set(r.json) == {"success", "status_code", "duration_ms", "message"}
    assert r.json["success"] is True and r.json["status_code"] == 200
    assert r.json["message"] is None and isinstance(r.json["duration_ms"], int)
    assert r.json["duration_ms"] >= 0
    [got] = receiving.wait_for(1)
    assert got.method == "POST" and got.path == "/hooks/in"
    assert Receiver.verify(got, w["secret"])
    import json
    envelope = json.loads(got.body)
    assert set(envelope) == {"event_id", "event", "timestamp", "organization_id", "data"}
    assert envelope["event"] == "ping" and envelope["timestamp"].endswith("Z")
    assert envelope["organization_id"] == str(keys.org.id)
    assert envelope["data"]["webhook_id"] == w["id"]
    # No delivery entry, and the webhook's counters stay as they were.
    assert WebhookDelivery.select().count() == 0 and Event.select().count() == 0
    assert client.get(f"{P}/webhooks/{w['id']}/deliveries", headers=auth(keys.ro)).json == []
    stored = Webhook.get_by_id(w["id"])
    assert stored.last_triggered_at is None and stored.failure_count == 0

    # After rotation the ping is signed with the new secret only.
    new = client.post(f"{P}/webhooks/{w['id']}/rotate-secret", headers=auth(raw)).json["secret"]
    assert client.post(f"{P}/webhooks/{w['id']}/test", headers=auth(raw)).json["success"] is True
    second = receiving.wait_for(2)[1]
    assert Receiver.verify(second, new) and not Receiver.verify(second, w["secret"])


def test_ping_failure_reports_the_status_not_the_body(client, keys, org, receiving):
    raw = keys.rw()
    w = create(client, raw, url=receiving.url).json
    receiving.respond(500)
    r = client.post(f"{P}/webhooks/{w['id']}/test", headers=auth(raw))
    assert r.status_code == 200
    assert r.json["success"] is False and r.json["status_code"] == 500
    assert r.json["message"] and "500" in r.json["message"]
    assert "ok" not in r.json["message"] and "{" not in r.json["message"]  # body: {"ok": false}
    assert WebhookDelivery.select().count() == 0
    assert Webhook.get_by_id(w["id"]).failure_count == 0


def test_ping_without_an_answer_has_status_code_0(client, keys, org, receiving):
    raw = keys.rw()
    w = create(client, raw, url=receiving.url).json
    receiving.close()  # nothing listens any more
    r = client.post(f"{P}/webhooks/{w['id']}/test", headers=auth(raw))
    assert r.status_code == 200 and r.json["success"] is False
    assert r.json["status_code"] == 0 and r.json["message"]


@pytest.mark.slow
def test_ping_to_a_receiver_that_hangs_ends_at_the_spec_s_10_seconds(client, keys, receiving):
    """The default timeout, for real: a receiver that hangs for 15 s is cut off at 10."""
    raw = keys.rw()
    w = create(client, raw, url=receiving.url).json
    receiving.hang(15)
    r = client.post(f"{P}/webhooks/{w['id']}/test", headers=auth(raw))
    assert r.status_code == 200 and r.json["success"] is False
    assert r.json["status_code"] == 0 and "timed out after 10 s" in r.json["message"]
    assert 9_900 <= r.json["duration_ms"] < 12_000


def test_ping_of_a_paused_chat_format_webhook(client, keys, receiving):
    raw = keys.rw()
    w = create(client, raw, url=receiving.url, format="embed", is_active=False).json
    r = client.post(f"{P}/webhooks/{w['id']}/test", headers=auth(raw))
    assert r.json["success"] is True
    [got] = receiving.wait_for(1)
    assert got.headers.get("X-SVC-Signature") is None  # chat formats are unsigned
    assert Webhook.get_by_id(w["id"]).is_active is False


def test_private_receivers_are_refused_unless_allowed(client, app, keys, https_receiver, trust_ca):  # noqa: F811
    raw = keys.rw()
    r = create(client, raw, url=https_receiver.url)
    assert r.status_code == 422 and r.json["error"] == "invalid_webhook_url"
    app.extensions["berth"].settings["WEBHOOK_CA_BUNDLE"] = trust_ca
    # Allowed when created, refused when sent once the setting is off again.
    app.extensions["berth"].settings["WEBHOOK_ALLOW_PRIVATE"] = True
    w = create(client, raw, url=https_receiver.localhost_url).json
    app.extensions["berth"].settings["WEBHOOK_ALLOW_PRIVATE"] = False
    r = client.post(f"{P}/webhooks/{w['id']}/test", headers=auth(raw))
    assert r.json["success"] is False and r.json["status_code"] == 0
    assert https_receiver.requests == []


def test_openapi_documents_every_operation(client):
    spec = client.get(f"{P}/openapi.json").json
    paths = spec["paths"]
    expected = {
        f"{P}/webhooks": {"get", "post"},
        f"{P}/webhooks/{{webhook_id}}": {"get", "patch", "delete"},
        f"{P}/webhooks/{{webhook_id}}/test": {"post"},
        f"{P}/webhooks/{{webhook_id}}/rotate-secret": {"post"},
        f"{P}/webhooks/{{webhook_id}}/deliveries": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path
        for m in methods:
            assert "429" in paths[path][m]["responses"]
    assert "201" in paths[f"{P}/webhooks"]["post"]["responses"]
    assert "200" in paths[f"{P}/webhooks/{{webhook_id}}"]["patch"]["responses"]
    assert "204" in paths[f"{P}/webhooks/{{webhook_id}}"]["delete"]["responses"]
    assert "deployment.completed" in str(spec["components"]["schemas"]["WebhookCreate"])
    assert "webhook_rate_limit" in str(spec)


def test_a_delivery_is_sent_again_as_a_new_one_of_the_same_event(client, keys, org, world,
                                                                  fake_clock):
    w, other = row(org), row(org)
    _deliveries(w, 2, dt.datetime(2026, 3, 1, 12, 0))
    _deliveries(other, 1, dt.datetime(2026, 3, 1, 12, 0))
    old = WebhookDelivery.select().where(WebhookDelivery.webhook == w.id).order_by(
        WebhookDelivery.created_at).first()
    raw = keys.rw()
    r = client.post(f"{P}/webhooks/{w.id}/deliveries/{old.id}/redeliver", headers=auth(raw))
    assert r.status_code == 201, r.json
    assert r.json["status"] == "retrying" and r.json["attempt_count"] == 0
    assert r.json["event"] == "deploy.completed" and r.json["id"] != str(old.id)
    new = WebhookDelivery.get_by_id(r.json["id"])
    assert new.event_id == old.event_id and new.next_attempt_at == fake_clock.now
    assert WebhookDelivery.get_by_id(old.id).status == "delivered"  # kept as it ended
    listed = client.get(f"{P}/webhooks/{w.id}/deliveries", headers=auth(raw)).json
    assert listed[0]["id"] == r.json["id"] and len(listed) == 3
    # Another webhook's delivery, or none, is not found; nothing is added.
    theirs = WebhookDelivery.get(WebhookDelivery.webhook == other.id)
    for path in (f"{w.id}/deliveries/{theirs.id}", f"{w.id}/deliveries/{new_uuid()}",
                 f"{new_uuid()}/deliveries/{old.id}"):
        r = client.post(f"{P}/webhooks/{path}/redeliver", headers=auth(raw))
        assert r.status_code == 404 and r.json["error"] == "not_found", path
    assert WebhookDelivery.select().count() == 4
