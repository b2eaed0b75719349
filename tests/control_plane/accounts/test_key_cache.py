"""Authenticated keys may be remembered between requests, but never past a
revocation, a deletion or an expiry: the very next request fails, whichever
process made the change. Each test first has the key succeed a few times, so
that any cache holds it."""

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import auth

BERTH = str(Path(sys.executable).parent / "berth")
P = "/api/public/v1"


def admin(app, *args):
    """`berth admin …` in its own process, on the app's database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CP_")}
    env.update(CP_DATA_DIR=app.config["DATA_DIR"], CP_SECRET_KEY=app.config["SECRET_KEY"])
    if app.config["DATABASE_URL"]:
        env["CP_DATABASE_URL"] = app.config["DATABASE_URL"]
    proc = subprocess.run([BERTH, "admin", *args], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def warm(client, raw, times=3):
    for _ in range(times):
        r = client.get(f"{P}/projects", headers=auth(raw))
        assert r.status_code == 200, r.json


def test_key_revoked_by_another_process_fails_on_the_next_request(client, world):
    org = world.org()
    raw, key = world.key(org, "read_only")
    other_raw, _ = world.key(org, "read_only")
    warm(client, raw)
    warm(client, other_raw)
    assert admin(client.application, "key", "revoke", key.public_id) == {"revoked": True}
    r = client.get(f"{P}/projects", headers=auth(raw))
    assert r.status_code == 401 and r.json["error"] == "key_revoked"
    assert r.headers["X-API-Key-Id"] == key.public_id  # a known key is named, refused or not
    # Another key is untouched by the revocation.
    warm(client, other_raw, times=1)


def test_key_revoked_through_the_service_fails_on_the_next_request(client, world):
    from control_plane.services.accounts import keys
    org = world.org()
    raw, key = world.key(org, "full_access")
    warm(client, raw)
    keys.revoke_key(key.public_id)
    for method in ("get", "post"):  # reads and writes alike
        r = getattr(client, method)(f"{P}/projects", headers=auth(raw), json={})
        assert r.status_code == 401 and r.json["error"] == "key_revoked"


def test_cached_key_expires_at_its_expiry_instant(client, world, fake_clock):
    org = world.org()
    expires = fake_clock.now + dt.timedelta(seconds=30)
    raw, _ = world.key(org, "read_only", expires_at=expires)
    warm(client, raw)
    fake_clock.now = expires - dt.timedelta(microseconds=1)
    warm(client, raw, times=1)
    fake_clock.now = expires
    r = client.get(f"{P}/projects", headers=auth(raw))
    assert r.status_code == 401 and r.json["error"] == "key_expired"


def test_deleted_key_fails_on_the_next_request(client, world, fake_clock):
    org = world.org()
    raw_revoked, revoked = world.key(org, "read_only")
    expires = fake_clock.now + dt.timedelta(seconds=30)
    raw_expired, expired = world.key(org, "read_only", expires_at=expires)
    warm(client, raw_revoked)
    warm(client, raw_expired)
    # Revoked and deleted with no request in between, in another process.
    assert admin(client.application, "key", "revoke", revoked.public_id) == {"revoked": True}
    assert admin(client.application, "key", "delete", revoked.public_id) == {"deleted": True}
    r = client.get(f"{P}/projects", headers=auth(raw_revoked))
    assert r.status_code == 401 and r.json["error"] == "invalid_api_key"

    # Expired (on the test's clock, which the CLI does not share), then deleted.
    from control_plane.services.accounts import keys
    fake_clock.now = expires
    keys.delete_key(expired.public_id)
    r = client.get(f"{P}/projects", headers=auth(raw_expired))
    assert r.status_code == 401 and r.json["error"] == "invalid_api_key"


def test_list_reads_wait_for_the_key_row_even_when_empty_or_refused(client, world):
    """A list read checks its remembered key in the page's own statement. An empty
    page (no row to carry the key's), a refused request (a forged cursor) and the
    servers list answer 401 all the same once the key is revoked elsewhere."""
    from control_plane.services.accounts import keys
    org = world.org()  # no projects: every page is empty
    checks = {f"{P}/projects": "key_revoked", f"{P}/projects?cursor=forged": "key_revoked",
              f"{P}/servers": "key_revoked"}
    for path, error in checks.items():
        raw, key = world.key(org, "read_only")
        warm(client, raw)
        assert client.get(path.replace("forged", ""), headers=auth(raw)).status_code in (200, 400)
        keys.revoke_key(key.public_id)
        r = client.get(path, headers=auth(raw))
        assert r.status_code == 401 and r.json["error"] == error, (path, r.json)
        # Counted before its key was found revoked: its window says so.
        assert r.headers["X-API-Key-Id"] == key.public_id
        assert r.headers["X-RateLimit-Remaining"] == str(120 - 5)


def test_key_row_changed_but_still_valid_answers_as_the_key_now_is(client, world):
    """A direct change to a key's row (an operator's UPDATE narrowing it to one
    project) shows on the very next list read, counted once against the limit."""
    from control_plane.models import ApiKey
    org = world.org()
    server = world.server(org)
    first, second = world.project(org, server), world.project(org, server)
    raw, key = world.key(org, "read_only")
    warm(client, raw)
    before = client.get(f"{P}/projects", headers=auth(raw))
    assert {row["id"] for row in before.json["data"]} == {str(first.id), str(second.id)}
    ApiKey.update(scope="project", project=second.id).where(ApiKey.id == key.id).execute()
    after = client.get(f"{P}/projects", headers=auth(raw))
    assert after.status_code == 200
    assert [row["id"] for row in after.json["data"]] == [str(second.id)]
    assert after.json["pagination"]["total"] == 1
    assert int(after.headers["X-RateLimit-Remaining"]) == \
        int(before.headers["X-RateLimit-Remaining"]) - 1
