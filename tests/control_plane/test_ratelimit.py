"""Per-key rate limits (spec: Limits, rate-limit headers), memory and Redis storage."""

import pytest

from control_plane.app import create_app
from control_plane.infra import migrate
from tests.conftest import auth
from tests.support.waiting import wait_for

P = "/api/public/v1"


def _exhaust(client, raw, n):
    return [client.get(f"{P}/projects", headers=auth(raw)).status_code for _ in range(n)]


@pytest.mark.parametrize("key_type, limit", [("full_access", 20), ("read_only", 120)])
def test_limit_per_key_type_then_429(client, world, key_type, limit):
    org = world.org()
    raw, key = world.key(org, key_type)
    first = client.get(f"{P}/projects", headers=auth(raw))
    assert first.headers["X-RateLimit-Limit"] == str(limit)
    assert first.headers["X-RateLimit-Remaining"] == str(limit - 1)
    assert first.headers["X-RateLimit-Window"] == "60"
    assert _exhaust(client, raw, limit - 1) == [200] * (limit - 1)
    r = client.get(f"{P}/projects", headers=auth(raw))
    assert r.status_code == 429
    assert r.json["error"] == "rate_limit_exceeded"
    assert 1 <= r.json["retry_after"] <= 60
    assert r.headers["Retry-After"] == str(r.json["retry_after"])
    assert r.headers["X-RateLimit-Remaining"] == "0"
    assert r.headers["X-RateLimit-Limit"] == str(limit)
    assert r.headers["X-API-Key-Id"] == key.public_id
    # Another key of the same organization has its own window.
    other, _ = world.key(org, key_type)
    assert client.get(f"{P}/projects", headers=auth(other)).status_code == 200


def test_writes_and_errors_count_toward_the_limit(client, world):
    org = world.org()
    raw, _ = world.key(org, "full_access")
    for _ in range(10):
        assert client.post(f"{P}/projects", headers=auth(raw), json={}).status_code == 422
    r = client.get(f"{P}/projects/00000000-0000-0000-0000-000000000000", headers=auth(raw))
    assert r.status_code == 404
    assert r.headers["X-RateLimit-Remaining"] == "9"


def test_redis_storage_is_shared_between_processes(tmp_path, redis_server):
    """Two app instances (as two web processes would be) share one count."""
    settings = {"DATA_DIR": str(tmp_path), "SECRET_KEY": "s", "REDIS_URL": redis_server.url}
    a, b = create_app(settings), create_app(settings)
    migrate.upgrade(a.extensions["berth"].db)
    a.extensions["berth"].limiter.reset()
    with a.app_context():
        from control_plane.services.accounts import keys, orgs
        org = orgs.create_org("o")
        _, raw = keys.create_key(org.id, "k", "full_access", "organization")
    ca, cb = a.test_client(), b.test_client()
    codes = [(ca if i % 2 else cb).get(f"{P}/projects", headers=auth(raw)).status_code
             for i in range(21)]
    assert codes == [200] * 20 + [429]


@pytest.fixture(params=["memory", "redis"])
def limiter(request):
    from control_plane.infra.ratelimit import RateLimiter
    url = request.getfixturevalue("redis_server").url if request.param == "redis" else None
    lim = RateLimiter(url)
    lim.reset()
    return lim


def test_target_limits_contract(limiter):
    """The hook later features use (metrics, runtime logs, webhook mutations)."""
    from limits import RateLimitItemPerMinute

    from control_plane.vocabulary.errors import RateLimited

    six = RateLimitItemPerMinute(6)
    states = [limiter.hit_target(six, "metrics:env", "env-1") for _ in range(6)]
    assert [s.remaining for s in states] == [5, 4, 3, 2, 1, 0]
    with pytest.raises(RateLimited) as exc:
        limiter.hit_target(six, "metrics:env", "env-1")
    body = exc.value.body()
    assert exc.value.status == 429 and body["error"] == "target_rate_limit"
    assert 1 <= body["retry_after"] <= 60 and exc.value.headers["Retry-After"]
    # Other targets and namespaces count separately.
    assert limiter.hit_target(six, "metrics:env", "env-2").remaining == 5
    assert limiter.hit_target(six, "metrics:server", "env-1").remaining == 5


def test_a_hit_leaves_the_moving_window_after_it(limiter):
    """Counted in a moving window: a hit frees its slot when its window has passed,
    and limits' own strategy (hit_all's test) reads the same count."""
    from limits import RateLimitItemPerSecond

    from control_plane.vocabulary.errors import RateLimited

    two = RateLimitItemPerSecond(2)
    assert [limiter.hit(two, "window", "k").remaining for _ in range(2)] == [1, 0]
    with pytest.raises(RateLimited):
        limiter.hit(two, "window", "k")
    assert not limiter.strategy.test(two, "window", "k")
    assert limiter.strategy.get_window_stats(two, "window", "k").remaining == 0
    # Its window (a second) passes: the slots free.
    wait_for(lambda: limiter.strategy.test(two, "window", "k"), timeout=3,
             what="the hits out of their window")
    assert limiter.hit(two, "window", "k").remaining == 1
    assert limiter.strategy.hit(two, "window", "k")  # limits' own hit counts there too
    assert not limiter.strategy.test(two, "window", "k")


def test_memory_windows_of_idle_keys_are_dropped():
    """In-process counting keeps no key whose last hit has left its window, nor
    one that was only read."""
    from limits import RateLimitItemPerSecond

    from control_plane.infra.ratelimit import RateLimiter

    limiter = RateLimiter()
    limiter.storage.SWEEP_SECONDS = 0.0  # sweep on every hit
    five = RateLimitItemPerSecond(5)
    for i in range(50):
        limiter.hit(five, "idle", str(i))
    assert len(limiter.storage._windows) == 50
    # The last of them leaves its window (a second), read without keeping anything.
    wait_for(lambda: limiter.window(five, "idle", "49").remaining == 5, timeout=3,
             what="the idle keys out of their windows")
    assert len(limiter.storage._windows) == 50  # not dropped until a hit sweeps
    assert limiter.hit(five, "idle", "fresh").remaining == 4
    assert list(limiter.storage._windows) == [five.key_for("idle", "fresh")]
    assert limiter.strategy.test(five, "idle", "never")  # a read keeps nothing
    assert list(limiter.storage._windows) == [five.key_for("idle", "fresh")]
