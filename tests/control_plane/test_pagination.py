"""The three pagination styles."""

import pytest

from control_plane.infra.pagination import page_page
from control_plane.models import Project
from tests.conftest import auth

P = "/api/public/v1"


def _walk(client, raw, path, limit):
    seen, cursor, pages = [], None, 0
    while True:
        url = f"{path}?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        body = client.get(url, headers=auth(raw)).json
        pages += 1
        seen += [row["id"] for row in body["data"]]
        meta = body["pagination"]
        assert meta["has_more"] == (meta["next_cursor"] is not None)
        if not meta["has_more"]:
            return seen, pages, meta["total"]
        cursor = meta["next_cursor"]


def test_cursor_pages_walk_every_row_once_in_order(client, world):
    org = world.org()
    server = world.server(org)
    made = [world.project(org, server) for _ in range(25)]
    raw, _ = world.key(org, "read_only")
    seen, pages, total = _walk(client, raw, f"{P}/projects", 10)
    assert pages == 3 and total == 25
    expected = [str(p.id) for p in sorted(made, key=lambda p: (p.created_at, p.id.hex))]
    assert seen == expected


def test_cursor_is_stable_when_rows_share_a_timestamp(client, world):
    org = world.org()
    server = world.server(org)
    for p in [world.project(org, server) for _ in range(7)]:
        Project.update(created_at=Project.get_by_id(p.id).created_at.replace(microsecond=0)).where(
            Project.id == p.id).execute()
    Project.update(created_at=Project.select().first().created_at).execute()
    raw, _ = world.key(org, "read_only")
    seen, _, total = _walk(client, raw, f"{P}/projects", 3)
    assert len(seen) == len(set(seen)) == total == 7



def test_every_walk_of_a_list_gives_the_same_rows_in_the_same_order(client, world):
    """Once a page statement is known, SQLite returns its rows in one step (one
    JSON array, compiled.Compiled): repeated walks, half the rows sharing a timestamp,
    keep the order of (created_at, id) and see every row once."""
    org = world.org()
    server = world.server(org)
    made = [world.project(org, server) for _ in range(30)]
    tie = Project.get_by_id(made[0].id).created_at
    Project.update(created_at=tie).where(Project.id.in_([p.id for p in made[::2]])).execute()
    rows = Project.select().where(Project.organization == org)
    expected = [str(p.id) for p in sorted(rows, key=lambda p: (p.created_at, p.id.hex))]
    raw, _ = world.key(org, "read_only")
    for _ in range(3):
        seen, pages, total = _walk(client, raw, f"{P}/projects", 7)
        assert (seen, pages, total) == (expected, 5, 30)

@pytest.mark.parametrize("cursor", ["garbage", "eyJhIjoxfQ", "a" * 500])
def test_forged_cursor_is_400_invalid_cursor(client, world, cursor):
    org = world.org()
    raw, _ = world.key(org, "read_only")
    r = client.get(f"{P}/projects?cursor={cursor}", headers=auth(raw))
    assert r.status_code == 400 and r.json["error"] == "invalid_cursor"


def test_cursor_of_another_list_is_refused(client, world):
    org = world.org()
    for _ in range(3):
        world.server(org)
    raw, _ = world.key(org, "read_only")
    servers_cursor = client.get(f"{P}/servers?limit=1", headers=auth(raw)).json["pagination"]["next_cursor"]
    assert servers_cursor
    r = client.get(f"{P}/projects?cursor={servers_cursor}", headers=auth(raw))
    assert r.status_code == 400 and r.json["error"] == "invalid_cursor"


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=abc", "limit=-1"])
def test_limit_out_of_range_is_422(client, world, query):
    org = world.org()
    raw, _ = world.key(org, "read_only")
    r = client.get(f"{P}/projects?{query}", headers=auth(raw))
    assert r.status_code == 422 and r.json["error"] == "validation_error"


def test_default_limit_is_20(client, world):
    org = world.org()
    server = world.server(org)
    for _ in range(21):
        world.project(org, server)
    raw, _ = world.key(org, "read_only")
    body = client.get(f"{P}/projects", headers=auth(raw)).json
    assert len(body["data"]) == 20 and body["pagination"]["has_more"] is True


def test_page_style(app, world):
    org = world.org()
    server = world.server(org)
    for _ in range(45):
        world.project(org, server)
    query = Project.select().order_by(Project.created_at, Project.id)
    first = page_page(query, page=1, page_size=20)
    last = page_page(query, page=3, page_size=20)
    beyond = page_page(query, page=9, page_size=20)
    assert (first["total"], first["total_pages"], len(first["items"])) == (45, 3, 20)
    assert len(last["items"]) == 5 and beyond["items"] == []
    assert {p.id for p in first["items"]}.isdisjoint({p.id for p in last["items"]})


def test_cursor_of_another_organization_is_refused(client, world):
    org_a, org_b = world.org(), world.org()
    for org in (org_a, org_b):
        server = world.server(org)
        for _ in range(3):
            world.project(org, server)
    raw_a, _ = world.key(org_a, "read_only")
    raw_b, _ = world.key(org_b, "read_only")
    cursor_a = client.get(f"{P}/projects?limit=1", headers=auth(raw_a)).json["pagination"]["next_cursor"]
    r = client.get(f"{P}/projects?cursor={cursor_a}", headers=auth(raw_b))
    assert r.status_code == 400 and r.json["error"] == "invalid_cursor"
    assert client.get(f"{P}/projects?cursor={cursor_a}", headers=auth(raw_a)).status_code == 200
