"""Authentication section of the spec, through HTTP."""

import pytest

from tests.conftest import auth

P = "/api/public/v1"


def test_bearer_and_x_api_key_are_equivalent(client, world):
    org = world.org()
    raw, key = world.key(org, "read_only")
    for header in ("bearer", "x-api-key"):
        r = client.get(f"{P}/projects", headers=auth(raw, header))
        assert r.status_code == 200
        assert r.headers["X-API-Key-Id"] == key.public_id
        assert key.public_id.startswith("key_")


def test_authorization_wins_over_x_api_key(client, world):
    org_a, org_b = world.org(), world.org()
    raw_a, key_a = world.key(org_a, "read_only")
    raw_b, _ = world.key(org_b, "read_only")
    r = client.get(f"{P}/projects", headers={"Authorization": f"Bearer {raw_a}", "X-API-Key": raw_b})
    assert r.headers["X-API-Key-Id"] == key_a.public_id
    # A broken Authorization header is not rescued by a good X-API-Key.
    r = client.get(f"{P}/projects", headers={"Authorization": "Bearer nope", "X-API-Key": raw_b})
    assert r.status_code == 401 and r.json["error"] == "invalid_api_key"


@pytest.mark.parametrize("headers, code", [
    ({}, "missing_api_key"),
    ({"Authorization": "Basic Zm9vOmJhcg=="}, "invalid_api_key"),
    ({"Authorization": "Bearer"}, "invalid_api_key"),
    ({"X-API-Key": "svc_live_rw_" + "A" * 40}, "invalid_api_key"),
    ({"X-API-Key": "not-a-key"}, "invalid_api_key"),
])
def test_missing_or_invalid_key_is_401_with_code(client, world, headers, code):
    r = client.get(f"{P}/projects", headers=headers)
    assert r.status_code == 401
    assert r.json == {"error": code, "message": r.json["message"]}
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    # No key is known: none is named, and no window is shown.
    assert not {"X-API-Key-Id", "X-RateLimit-Limit", "X-RateLimit-Remaining",
                "X-RateLimit-Window"} & set(r.headers.keys())


def test_key_with_wrong_type_prefix_is_invalid(client, world):
    org = world.org()
    raw, _ = world.key(org, "read_only")
    forged = "svc_live_rw_" + raw[len("svc_live_ro_"):]
    assert client.get(f"{P}/projects", headers=auth(forged)).status_code == 401


def test_expired_key_is_401_key_expired(client, world, fake_clock):
    org = world.org()
    raw, _ = world.key(org, "read_only", expires_at=fake_clock.now)
    fake_clock.advance(seconds=-1)
    assert client.get(f"{P}/projects", headers=auth(raw)).status_code == 200
    fake_clock.advance(seconds=2)
    r = client.get(f"{P}/projects", headers=auth(raw))
    assert r.status_code == 401 and r.json["error"] == "key_expired"


def test_revoked_key_is_rejected(client, world):
    from control_plane.services.accounts import keys
    org = world.org()
    raw, key = world.key(org, "read_only")
    keys.revoke_key(key.public_id)
    r = client.get(f"{P}/projects", headers=auth(raw))
    assert r.status_code == 401 and r.json["error"] == "key_revoked"


@pytest.mark.parametrize("key_type, limit", [("read_only", 120), ("full_access", 20)])
def test_a_refused_key_that_is_known_is_named_with_its_window(client, world, fake_clock,
                                                             key_type, limit):
    """Spec, Authentication 8 and Limits: every response carries the key's id and
    its rate-limit headers, a 401 for an expired or revoked key included. Its
    refused requests do not count: the window shows what the key had used."""
    from control_plane.services.accounts import keys
    org = world.org()
    raw_expired, expired = world.key(org, key_type, expires_at=fake_clock.now)
    raw_revoked, revoked = world.key(org, key_type)
    fake_clock.advance(seconds=-1)
    for raw in (raw_expired, raw_revoked):
        assert client.get(f"{P}/projects", headers=auth(raw)).status_code == 200
    fake_clock.advance(seconds=2)
    keys.revoke_key(revoked.public_id)
    for raw, key, code in ((raw_expired, expired, "key_expired"),
                           (raw_revoked, revoked, "key_revoked")):
        for _ in range(2):
            r = client.post(f"{P}/projects", headers=auth(raw), json={})
            assert r.status_code == 401 and r.json["error"] == code
            assert r.headers["X-API-Key-Id"] == key.public_id
            assert (r.headers["X-RateLimit-Limit"], r.headers["X-RateLimit-Remaining"],
                    r.headers["X-RateLimit-Window"]) == (str(limit), str(limit - 1), "60")


@pytest.mark.parametrize("method", ["post", "patch", "delete", "put"])
def test_read_only_key_cannot_write(client, world, method):
    org = world.org()
    project = world.project(org)
    raw, _ = world.key(org, "read_only")
    path = f"{P}/projects" if method == "post" else f"{P}/projects/{project.id}"
    r = getattr(client, method)(path, headers={**auth(raw), "X-Confirm-Delete": "true"},
                                json={"name": "x", "server_id": str(project.server_id)})
    # PUT has no route at all, and is still a write the key may not make (rule 3).
    assert r.status_code == 403 and r.json["error"] == "write_access_required"
    assert client.get(f"{P}/projects/{project.id}", headers=auth(raw)).json["name"] == project.name


def test_key_whose_owner_was_deleted_cannot_write(client, world):
    from control_plane.services.accounts import orgs
    org = world.org()
    owner = world.user(org)
    server = world.server(org)
    raw, _ = world.key(org, owner_id=owner.id)
    body = {"name": "p", "server_id": str(server.id)}
    assert client.post(f"{P}/projects", headers=auth(raw), json=body).status_code == 201
    orgs.delete_user(owner.id)
    r = client.post(f"{P}/projects", headers=auth(raw), json=body)
    assert r.status_code == 409 and r.json["error"] == "key_has_no_owner"
    assert client.get(f"{P}/projects", headers=auth(raw)).json["pagination"]["total"] == 1


def test_other_organization_resources_are_404(client, world):
    org_a, org_b = world.org(), world.org()
    project_b = world.project(org_b)
    raw_a, _ = world.key(org_a)
    r = client.get(f"{P}/projects/{project_b.id}", headers=auth(raw_a))
    assert r.status_code == 404 and r.json["error"] == "not_found"
    r = client.patch(f"{P}/projects/{project_b.id}", headers=auth(raw_a), json={"name": "x"})
    assert r.status_code == 404


def test_project_scoped_key_sees_only_its_project(client, world):
    org = world.org()
    mine, other = world.project(org), world.project(org)
    raw, _ = world.key(org, "read_only", scope="project", project=mine)
    body = client.get(f"{P}/projects", headers=auth(raw)).json
    assert [p["id"] for p in body["data"]] == [str(mine.id)]
    assert client.get(f"{P}/projects/{other.id}", headers=auth(raw)).status_code == 404
    assert client.get(f"{P}/projects/{mine.id}", headers=auth(raw)).status_code == 200


def test_capability_codes_for_tickets(client, world):
    org = world.org()
    project = world.project(org)
    cases = [
        (world.key(org, "read_only")[0], 403, "support_tickets_not_enabled"),
        (world.key(org, "full_access")[0], 403, "support_tickets_not_enabled"),
        (world.key(org, "read_only", scope="project", project=project)[0], 403, "org_scope_required"),
        (world.key(org, "read_only", support_tickets=True)[0], 200, None),
        (world.key(org, "full_access", support_tickets=True)[0], 200, None),
    ]
    for raw, status, code in cases:
        r = client.get(f"{P}/support/tickets", headers=auth(raw))
        assert r.status_code == status
        if code:
            assert r.json["error"] == code


def test_project_scoped_keys_cannot_get_capabilities(world):
    from control_plane.vocabulary.errors import ApiError
    org = world.org()
    project = world.project(org)
    with pytest.raises(ApiError):
        world.key(org, scope="project", project=project, support_tickets=True)
    with pytest.raises(ApiError):
        world.key(org, scope="project", project=project, server_registration=True)


def test_keys_are_stored_only_as_digests(app, world):
    from control_plane.models import ApiKey
    org = world.org()
    raw, key = world.key(org)
    stored = ApiKey.get_by_id(key.id)
    assert raw not in repr(stored.__data__)
    assert stored.prefix == raw[:16] and stored.key_hash != raw and len(stored.key_hash) == 64


def test_key_digest_stays_hmac_sha256_under_the_secrets_pepper(app, client, world):
    """The stored digest is HMAC-SHA256 of the key under a pepper derived from
    CP_SECRET_KEY: databases made by earlier releases hold it, so however it is
    computed, their keys must keep matching."""
    import hashlib
    import hmac

    from control_plane.models import ApiKey
    org = world.org()
    raw, key = world.key(org)
    pepper = hmac.new(app.config["SECRET_KEY"].encode(), b"berth secret pepper v1",
                      hashlib.sha256).digest()
    expected = hmac.new(pepper, raw.encode(), hashlib.sha256).hexdigest()
    assert ApiKey.get_by_id(key.id).key_hash == expected
    for _ in range(2):  # the first lookup, then the remembered key
        assert client.get(f"{P}/projects", headers=auth(raw)).status_code == 200


@pytest.mark.parametrize("method,path", [
    ("get", "/nothing/here"),             # no route: 404
    ("get", "/projects/not-a-uuid"),      # a path id that is not a UUID: 404
    ("put", "/projects"),                 # no PUT route for a full-access key: 405
])
def test_unmatched_requests_are_authenticated_counted_and_stamped(client, world, method, path):
    org = world.org()
    raw, key = world.key(org)
    first = getattr(client, method)(f"{P}{path}", headers=auth(raw))
    assert first.status_code in (404, 405) and first.json["error"] in ("not_found",
                                                                         "method_not_allowed")
    assert first.headers["X-API-Key-Id"] == key.public_id
    assert first.headers["X-RateLimit-Limit"] == "20" and first.headers["X-RateLimit-Window"] == "60"
    second = getattr(client, method)(f"{P}{path}", headers=auth(raw))
    assert int(second.headers["X-RateLimit-Remaining"]) == int(
        first.headers["X-RateLimit-Remaining"]) - 1
    # Without a key, the answer is the 401, whatever the path.
    anonymous = getattr(client, method)(f"{P}{path}")
    assert anonymous.status_code == 401 and anonymous.json["error"] == "missing_api_key"


def test_documentation_needs_no_key(client):
    assert client.get(f"{P}/openapi.json").status_code == 200
    assert client.get(f"{P}/docs").status_code == 200
    assert client.get(f"{P}/redoc").status_code == 200


def test_keys_only_match_under_the_secret_they_were_made_with(app, world):
    """Keys are stored as a digest keyed by CP_SECRET_KEY: another secret over the
    same database matches no key; the original secret matches again."""
    from control_plane.app import create_app
    raw, _ = world.key(world.org())
    settings = {k: app.config[k] for k in ("DATA_DIR", "SECRET_KEY", "DATABASE_URL")}

    def get_projects(secret):
        other = create_app({**settings, "SECRET_KEY": secret})
        try:
            return other.test_client().get(f"{P}/projects", headers=auth(raw))
        finally:  # the pool of a second app on the same database (PostgreSQL)
            db = other.extensions["berth"].db
            db.close_all() if hasattr(db, "close_all") else db.close()

    r = get_projects("another-secret")
    assert r.status_code == 401 and r.json["error"] == "invalid_api_key"
    assert get_projects(settings["SECRET_KEY"]).status_code == 200
