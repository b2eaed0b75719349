"""Release notes: GET /changelog with any key, newest version first, filters and
offset pages."""

import pytest

from tests.conftest import auth

CHANGELOG = "/api/public/v1/changelog"
ENTRY_KEYS = {"version", "date", "title", "highlights", "categories"}

# Inserted out of order on purpose; dates do not follow versions (1.10.2 is a
# later patch of an older line than 2.0.0).
RELEASES = [
    ("1.10.0", "2024-02-01"),
    ("2.0.0", "2024-02-15"),
    ("0.9.9", "2023-12-01"),
    ("1.9.10", "2024-01-20"),
    ("1.10.2", "2024-03-01"),
    ("1.9.0", "2024-01-10"),
    ("1.2.0", "2023-12-15"),
]
NEWEST_FIRST = ["2.0.0", "1.10.2", "1.10.0", "1.9.10", "1.9.0", "1.2.0", "0.9.9"]


def add(version, date, title=None, highlights=(), **categories):
    from control_plane.services.support import releases
    return releases.add_release(version=version, date=date, title=title or f"Release {version}",
                                highlights=highlights, categories=categories)


@pytest.fixture
def seeded(world):
    for version, date in RELEASES:
        add(version, date)


@pytest.fixture
def ro_key(world):
    return world.key(world.org(), "read_only")[0]


def versions(client, raw, **params):
    r = client.get(CHANGELOG, headers=auth(raw), query_string={"limit": 100, **params})
    assert r.status_code == 200, r.json
    return [e["version"] for e in r.json["entries"]]


def test_any_key_can_read(client, world, seeded):
    org = world.org()
    project = world.project(org)
    keys = [world.key(org, "read_only")[0], world.key(org, "full_access")[0],
            world.key(org, "read_only", scope="project", project=project)[0],
            world.key(org, "full_access", scope="project", project=project)[0]]
    for raw in keys:
        r = client.get(CHANGELOG, headers=auth(raw))
        assert r.status_code == 200
        assert [e["version"] for e in r.json["entries"]] == NEWEST_FIRST
    assert client.get(CHANGELOG).status_code == 401


def test_read_only_key_cannot_write(client, ro_key, world):
    r = client.post(CHANGELOG, headers=auth(ro_key), json={})
    assert r.status_code == 403 and r.json["error"] == "write_access_required"
    # A full-access key may write, but the changelog takes no writes: 405, JSON.
    rw = client.post(CHANGELOG, headers=auth(world.key(world.org())[0]), json={})
    assert rw.status_code == 405 and rw.json["error"] == "method_not_allowed"
    assert rw.headers["Allow"] and rw.headers["X-API-Key-Id"].startswith("key_")


def test_newest_version_first_compared_as_numbers(client, seeded, ro_key):
    assert versions(client, ro_key) == NEWEST_FIRST


def test_page_and_entry_shape(client, world, ro_key):
    add("3.1.4", "2024-05-06", "Pi release", highlights=["Faster deploys", "New CLI"],
        added=["Backups API"], fixed=["Crash on start", "Typo"])
    r = client.get(CHANGELOG, headers=auth(ro_key))
    assert r.status_code == 200
    assert set(r.json) == {"entries", "total", "limit", "offset"}
    assert (r.json["total"], r.json["limit"], r.json["offset"]) == (1, 20, 0)
    [entry] = r.json["entries"]
    assert entry == {
        "version": "3.1.4", "date": "2024-05-06", "title": "Pi release",
        "highlights": ["Faster deploys", "New CLI"],
        "categories": {"added": ["Backups API"], "fixed": ["Crash on start", "Typo"]},
    }


def test_categories_only_contain_keys_the_release_has(client, world, ro_key):
    add("1.0.0", "2024-01-01")
    add("1.1.0", "2024-01-02", improved=["Speed"])
    add("1.2.0", "2024-01-03", added=["A"], changed=["C"], improved=["I"], fixed=["F"])
    add("1.3.0", "2024-01-04", changed=[], fixed=["Only fixes"])
    entries = client.get(CHANGELOG, headers=auth(ro_key)).json["entries"]
    cats = {e["version"]: e["categories"] for e in entries}
    assert cats == {
        "1.3.0": {"fixed": ["Only fixes"]},
        "1.2.0": {"added": ["A"], "changed": ["C"], "improved": ["I"], "fixed": ["F"]},
        "1.1.0": {"improved": ["Speed"]},
        "1.0.0": {},
    }
    for e in entries:
        assert set(e) == ENTRY_KEYS
        assert e["highlights"] == []


@pytest.mark.parametrize("since, expected", [
    ("1.9.0", ["2.0.0", "1.10.2", "1.10.0", "1.9.10"]),
    ("1.9.9", ["2.0.0", "1.10.2", "1.10.0", "1.9.10"]),
    ("1.10.0", ["2.0.0", "1.10.2"]),
    ("1.10.1", ["2.0.0", "1.10.2"]),
    ("1.10.2", ["2.0.0"]),
    ("1.2.0", ["2.0.0", "1.10.2", "1.10.0", "1.9.10", "1.9.0"]),
    ("0.0.0", NEWEST_FIRST),
    ("2.0.0", []),
    ("10.0.0", []),
])
def test_since_version_returns_only_strictly_newer(client, seeded, ro_key, since, expected):
    r = client.get(CHANGELOG, headers=auth(ro_key), query_string={"since_version": since})
    assert r.status_code == 200
    assert [e["version"] for e in r.json["entries"]] == expected
    assert r.json["total"] == len(expected)


@pytest.mark.parametrize("since, expected", [
    ("2024-02-15", ["2.0.0", "1.10.2"]),  # on the day counts
    ("2024-02-16", ["1.10.2"]),
    ("2024-01-10", ["2.0.0", "1.10.2", "1.10.0", "1.9.10", "1.9.0"]),
    ("2000-01-01", NEWEST_FIRST),
    ("2024-03-02", []),
])
def test_since_date_is_on_or_after(client, seeded, ro_key, since, expected):
    r = client.get(CHANGELOG, headers=auth(ro_key), query_string={"since_date": since})
    assert r.status_code == 200
    assert [e["version"] for e in r.json["entries"]] == expected
    assert r.json["total"] == len(expected)


def test_since_version_and_since_date_combine(client, seeded, ro_key):
    assert versions(client, ro_key, since_version="1.9.0", since_date="2024-02-01") == \
        ["2.0.0", "1.10.2", "1.10.0"]
    assert versions(client, ro_key, since_version="1.10.0", since_date="2024-03-01") == \
        ["1.10.2"]
    assert versions(client, ro_key, since_version="0.9.9", since_date="2023-12-01") == \
        NEWEST_FIRST[:-1]
    assert versions(client, ro_key, since_version="2.0.0", since_date="2000-01-01") == []


def test_offset_pages_walk_all_releases(client, seeded, ro_key):
    seen = []
    for offset in range(0, 8, 3):
        r = client.get(CHANGELOG, headers=auth(ro_key), query_string={"limit": 3,
                                                                     "offset": offset})
        assert r.status_code == 200
        assert (r.json["total"], r.json["limit"], r.json["offset"]) == (7, 3, offset)
        seen += [e["version"] for e in r.json["entries"]]
    assert seen == NEWEST_FIRST
    beyond = client.get(CHANGELOG, headers=auth(ro_key), query_string={"offset": 50}).json
    assert beyond == {"entries": [], "total": 7, "limit": 20, "offset": 50}


def test_offset_pages_with_filter(client, seeded, ro_key):
    r = client.get(CHANGELOG, headers=auth(ro_key),
                   query_string={"since_version": "1.9.0", "limit": 2, "offset": 2})
    assert [e["version"] for e in r.json["entries"]] == ["1.10.0", "1.9.10"]
    assert r.json["total"] == 4


def test_default_limit_is_20_and_max_is_100(client, world, ro_key):
    for minor in range(25):
        add(f"1.{minor}.0", "2024-01-01")
    body = client.get(CHANGELOG, headers=auth(ro_key)).json
    assert (body["limit"], body["offset"], body["total"]) == (20, 0, 25)
    assert [e["version"] for e in body["entries"]] == [f"1.{m}.0" for m in range(24, 4, -1)]
    assert len(client.get(CHANGELOG, headers=auth(ro_key),
                          query_string={"limit": 100}).json["entries"]) == 25
    assert len(client.get(CHANGELOG, headers=auth(ro_key),
                          query_string={"limit": 1}).json["entries"]) == 1


@pytest.mark.parametrize("params", [
    {"limit": 0}, {"limit": 101}, {"limit": -5}, {"limit": "x"}, {"offset": -1},
    {"offset": "x"},
])
def test_limit_and_offset_bounds_are_422(client, ro_key, params):
    r = client.get(CHANGELOG, headers=auth(ro_key), query_string=params)
    assert r.status_code == 422
    assert set(r.json) == {"error", "message", "details"}
    assert r.json["error"] == "validation_error"
    assert next(iter(params)) in str(r.json["details"])


@pytest.mark.parametrize("version", ["1.2", "abc", "01.2.3", "1.02.3", "1.2.3.4", "v1.2.3",
                                     "1.2.x", "-1.2.3", "1..3"])
def test_invalid_since_version_is_422(client, seeded, ro_key, version):
    r = client.get(CHANGELOG, headers=auth(ro_key), query_string={"since_version": version})
    assert r.status_code == 422
    assert r.json["error"] == "validation_error"
    assert "since_version" in str(r.json["details"])


@pytest.mark.parametrize("date", ["2024-13-01", "2024-02-30", "yesterday", "01/02/2024",
                                  "2024-02-01T00:00:00Z"])
def test_invalid_since_date_is_422(client, seeded, ro_key, date):
    r = client.get(CHANGELOG, headers=auth(ro_key), query_string={"since_date": date})
    assert r.status_code == 422
    assert r.json["error"] == "validation_error"
    assert "since_date" in str(r.json["details"])


def test_add_release_rejects_duplicates_and_bad_input(world):
    from control_plane.vocabulary.errors import ApiError
    add("1.0.0", "2024-01-01")
    for version, date in (("1.0.0", "2024-02-01"), ("1.0", "2024-01-01"),
                          ("1.0.1", "2024-1-1x")):
        with pytest.raises(ApiError):
            add(version, date)
