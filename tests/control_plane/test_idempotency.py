"""Idempotency rules 1-6, through HTTP."""

import datetime as dt

from control_plane.models import ApiKey, Deployment, IdempotencyRecord, Project, Webhook
from tests.conftest import auth, new_uuid

P = "/api/public/v1"


def _setup(world):
    org = world.org()
    raw, key = world.key(org)
    server = world.server(org)
    return raw, key, {"name": "idem", "server_id": str(server.id)}


def test_replay_returns_original_status_body_and_header(client, world):
    raw, _, body = _setup(world)
    h = {**auth(raw), "X-Idempotency-Key": "k-1"}
    first = client.post(f"{P}/projects", headers=h, json=body)
    again = client.post(f"{P}/projects", headers=h, json=body)
    assert first.status_code == again.status_code == 201
    assert again.json == first.json
    assert again.headers["X-Idempotency-Replayed"] == "true"
    assert "X-Idempotency-Replayed" not in first.headers
    assert again.headers["X-API-Key-Id"] and again.headers["X-RateLimit-Remaining"]
    assert Project.select().count() == 1


def test_key_reused_for_another_operation_returns_first_result(client, world):
    raw, _, body = _setup(world)
    h = {**auth(raw), "X-Idempotency-Key": "k-2"}
    first = client.post(f"{P}/projects", headers=h, json=body)
    other = client.post(f"{P}/projects", headers=h, json={"name": "different"})  # even invalid
    assert other.status_code == 201 and other.json == first.json
    assert Project.select().count() == 1


def test_keys_are_per_api_key(client, world):
    raw, key, body = _setup(world)
    raw2, _ = world.key(key.organization)
    h1 = {**auth(raw), "X-Idempotency-Key": "shared"}
    h2 = {**auth(raw2), "X-Idempotency-Key": "shared"}
    a = client.post(f"{P}/projects", headers=h1, json=body)
    b = client.post(f"{P}/projects", headers=h2, json=body)
    assert a.json["id"] != b.json["id"]
    assert "X-Idempotency-Replayed" not in b.headers


def test_after_24_hours_the_key_is_new(client, world, fake_clock):
    raw, _, body = _setup(world)
    h = {**auth(raw), "X-Idempotency-Key": "k-3"}
    first = client.post(f"{P}/projects", headers=h, json=body)
    fake_clock.advance(hours=23, minutes=59)
    assert client.post(f"{P}/projects", headers=h, json=body).json["id"] == first.json["id"]
    fake_clock.advance(minutes=2)
    later = client.post(f"{P}/projects", headers=h, json=body)
    assert later.status_code == 201 and later.json["id"] != first.json["id"]
    assert "X-Idempotency-Replayed" not in later.headers
    assert Project.select().count() == 2


def _same_answer(first, again):
    """Rule 3: the cached response, byte for byte, with its original status."""
    assert (again.status_code, again.data, again.content_type) == \
        (first.status_code, first.data, first.content_type)
    assert again.headers["X-Idempotency-Replayed"] == "true"
    assert "X-Idempotency-Replayed" not in first.headers


def test_a_refusal_the_operation_made_is_replayed_and_nothing_runs(client, world):
    """A 422, 404 or 409 is the result of the request's execution: a duplicate
    gets it again, even once the request would now succeed."""
    raw, _, body = _setup(world)
    h = {**auth(raw), "X-Idempotency-Key": "k-4"}
    invalid = client.post(f"{P}/projects", headers=h, json={"name": "x"})
    assert invalid.status_code == 422 and invalid.json["error"] == "validation_error"
    _same_answer(invalid, client.post(f"{P}/projects", headers=h, json=body))
    assert Project.select().count() == 0

    missing = f"{P}/environments/{new_uuid()}/actions/restart"
    h404 = {**auth(raw), "X-Idempotency-Key": "k-404"}
    first = client.post(missing, headers=h404)
    assert first.status_code == 404 and first.json["error"] == "not_found"
    _same_answer(first, client.post(missing, headers=h404))


def test_a_conflict_is_replayed_and_the_action_not_run_once_it_could(client, world):
    raw, key, _ = _setup(world)
    env = world.environment(world.project(key.organization))
    restart = f"{P}/environments/{env.id}/actions/restart"
    assert client.post(restart, headers=auth(raw)).status_code == 202  # a task in progress
    h = {**auth(raw), "X-Idempotency-Key": "k-409"}
    busy = client.post(restart, headers=h)
    assert busy.status_code == 409, busy.json
    Deployment.update(status="failed").execute()  # the task in the way ended
    _same_answer(busy, client.post(restart, headers=h))
    assert Deployment.select().count() == 1
    # The same request under a new key does run.
    assert client.post(restart, headers={**auth(raw), "X-Idempotency-Key": "k-new"}
                       ).status_code == 202


def test_refusals_before_the_operation_leave_the_key_free(client, app, world):
    """401, 403 and 429 say who may ask or when, not what the operation did: the
    same key retried once they no longer apply is executed."""
    raw, key, body = _setup(world)
    h = {**auth(raw), "X-Idempotency-Key": "k-free"}
    unauthenticated = client.post(f"{P}/projects", json=body,
                                  headers={"X-Idempotency-Key": "k-free"})
    assert unauthenticated.status_code == 401
    # A project-scoped key may not create projects (403), until an operator widens it.
    ApiKey.update(scope="project", project=world.project(key.organization).id).where(
        ApiKey.id == key.id).execute()
    scoped = client.post(f"{P}/projects", headers=h, json=body)
    assert scoped.status_code == 403 and scoped.json["error"] == "org_scope_required"
    ApiKey.update(scope="organization", project=None).where(ApiKey.id == key.id).execute()
    # The key's own limit (a request hook) and the webhook mutations' (in the view).
    while client.get(f"{P}/projects", headers=auth(raw)).status_code != 429:
        pass
    limited = client.post(f"{P}/projects", headers=h, json=body)
    assert limited.status_code == 429 and limited.json["error"] == "rate_limit_exceeded"
    app.extensions["berth"].limiter.reset()
    created = client.post(f"{P}/projects", headers=h, json=body)
    assert created.status_code == 201 and "X-Idempotency-Replayed" not in created.headers

    hook = {"url": "https://hooks.example.com/x", "events": ["deploy.completed"]}
    for _ in range(10):
        assert client.post(f"{P}/webhooks", headers=auth(raw), json=hook).status_code == 201
    hw = {**auth(raw), "X-Idempotency-Key": "k-hook"}
    limited = client.post(f"{P}/webhooks", headers=hw, json=hook)
    assert limited.status_code == 429 and limited.json["error"] == "webhook_rate_limit"
    app.extensions["berth"].limiter.reset()
    made = client.post(f"{P}/webhooks", headers=hw, json=hook)
    assert made.status_code == 201 and "X-Idempotency-Replayed" not in made.headers
    assert Webhook.select().count() == 11


def test_in_flight_key_is_409_until_its_lease_ends(client, world, fake_clock):
    """A first request still in flight (or one that died mid-way) holds the key."""
    raw, key, body = _setup(world)
    now = fake_clock.now
    IdempotencyRecord.create(api_key=key.id, key="k-5", method="POST", path=f"{P}/projects",
                             locked_until=now + dt.timedelta(seconds=60),
                             expires_at=now + dt.timedelta(hours=24))
    h = {**auth(raw), "X-Idempotency-Key": "k-5"}
    r = client.post(f"{P}/projects", headers=h, json=body)
    assert r.status_code == 409 and r.json["error"] == "idempotency_key_in_use"
    assert Project.select().count() == 0
    # The first request died: once its lease is over, a retry goes through, once.
    fake_clock.advance(seconds=61)
    r = client.post(f"{P}/projects", headers=h, json=body)
    assert r.status_code == 201 and "X-Idempotency-Replayed" not in r.headers
    again = client.post(f"{P}/projects", headers=h, json=body)
    assert again.headers["X-Idempotency-Replayed"] == "true"
    assert Project.select().count() == 1


def test_header_ignored_on_patch_and_get(client, world):
    raw, _, body = _setup(world)
    created = client.post(f"{P}/projects", headers=auth(raw), json=body).json
    h = {**auth(raw), "X-Idempotency-Key": "k-6"}
    a = client.patch(f"{P}/projects/{created['id']}", headers=h, json={"name": "a"})
    b = client.patch(f"{P}/projects/{created['id']}", headers=h, json={"name": "b"})
    assert a.json["name"] == "a" and b.json["name"] == "b"
    assert "X-Idempotency-Replayed" not in b.headers
    assert client.get(f"{P}/projects", headers=h).status_code == 200
    assert IdempotencyRecord.select().count() == 0


def test_overlong_key_is_rejected(client, world):
    raw, _, body = _setup(world)
    r = client.post(f"{P}/projects", headers={**auth(raw), "X-Idempotency-Key": "x" * 256},
                    json=body)
    assert r.status_code == 400 and r.json["error"] == "invalid_idempotency_key"
    assert Project.select().count() == 0


def test_records_survive_a_restart(app, world, tmp_path, backend, request):
    """Stored in the database: a new app instance on the same database replays."""
    from control_plane.app import create_app
    raw, _, body = _setup(world)
    h = {**auth(raw), "X-Idempotency-Key": "k-7"}
    first = app.test_client().post(f"{P}/projects", headers=h, json=body)
    restarted = create_app({k: app.config[k] for k in ("DATA_DIR", "SECRET_KEY", "DATABASE_URL")})
    again = restarted.test_client().post(f"{P}/projects", headers=h, json=body)
    assert again.status_code == 201 and again.json == first.json
    assert again.headers["X-Idempotency-Replayed"] == "true"


def test_expired_records_are_pruned(client, world, fake_clock):
    raw, key, body = _setup(world)
    for n in range(3):
        client.post(f"{P}/projects", headers={**auth(raw), "X-Idempotency-Key": f"old-{n}"}, json=body)
    fake_clock.advance(hours=25)
    client.post(f"{P}/projects", headers={**auth(raw), "X-Idempotency-Key": "new"}, json=body)
    assert [r.key for r in IdempotencyRecord.select()] == ["new"]


def test_key_reused_on_another_path_replays_the_first_operation(client, world):
    """Rule 5 across paths: a webhook create and an environment action sent with
    the key of a project create answer that create, and do nothing."""
    raw, _, body = _setup(world)
    h = {**auth(raw), "X-Idempotency-Key": "k-8"}
    first = client.post(f"{P}/projects", headers=h, json=body)
    assert first.status_code == 201
    env = world.environment(Project.get_by_id(first.json["id"]))
    for path, payload in ((f"{P}/webhooks", {"url": "https://hooks.example.com/x",
                                             "events": ["deploy.completed"]}),
                          (f"{P}/environments/{env.id}/actions/restart", None)):
        again = client.post(path, headers=h, json=payload)
        assert again.status_code == 201 and again.json == first.json, path
        assert again.headers["X-Idempotency-Replayed"] == "true"
    assert Project.select().count() == 1
    assert Webhook.select().count() == 0 and Deployment.select().count() == 0
    # Without the key, the same requests do run.
    assert client.post(f"{P}/environments/{env.id}/actions/restart",
                       headers=auth(raw)).status_code == 202


def test_header_ignored_on_delete(client, world):
    """Rule 6: a DELETE is not cached; repeating it is a 404, not a replay."""
    raw, _, body = _setup(world)
    created = client.post(f"{P}/projects", headers=auth(raw), json=body).json
    h = {**auth(raw), "X-Idempotency-Key": "k-9", "X-Confirm-Delete": "true"}
    first = client.delete(f"{P}/projects/{created['id']}", headers=h)
    assert first.status_code == 204 and "X-Idempotency-Replayed" not in first.headers
    assert Project.get_by_id(created["id"]).deleted_at is not None
    again = client.delete(f"{P}/projects/{created['id']}", headers=h)
    assert again.status_code == 404 and again.json["error"] == "not_found"
    assert "X-Idempotency-Replayed" not in again.headers
    assert IdempotencyRecord.select().count() == 0
