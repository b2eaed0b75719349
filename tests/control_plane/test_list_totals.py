"""`pagination.total` of cursor lists: the count of every row the list holds
for the key, on every page, including an empty one."""

from tests.conftest import auth

P = "/api/public/v1"


def page(client, raw, path, **query):
    r = client.get(path, headers=auth(raw), query_string=query)
    assert r.status_code == 200, r.json
    return r.json["data"], r.json["pagination"]


def test_total_on_every_page_and_on_an_empty_list(client, world):
    org, other = world.org(), world.org()
    server = world.server(org)
    made = [world.project(org, server) for _ in range(5)]
    world.project(other)  # another organization's: never counted
    raw, _ = world.key(org, "read_only")
    data, meta = page(client, raw, f"{P}/projects", limit=2)
    assert (len(data), meta["total"], meta["has_more"]) == (2, 5, True)
    data, meta = page(client, raw, f"{P}/projects", limit=2, cursor=meta["next_cursor"])
    assert (len(data), meta["total"]) == (2, 5)
    assert "_berth_total" not in data[0]

    scoped, _ = world.key(org, "read_only", scope="project", project=made[0])
    data, meta = page(client, scoped, f"{P}/projects")
    assert (len(data), meta["total"]) == (1, 1)

    empty_raw, _ = world.key(world.org(), "read_only")
    assert page(client, empty_raw, f"{P}/projects") == (
        [], {"has_more": False, "next_cursor": None, "total": 0})


def test_empty_page_after_a_cursor_still_has_the_total(client, world):
    org = world.org()
    server = world.server(org)
    made = [world.project(org, server) for _ in range(3)]
    raw, _ = world.key(org, "full_access")
    data, meta = page(client, raw, f"{P}/projects", limit=2)
    # The rows after the cursor go before the next page is read.
    last = next(p for p in made if str(p.id) not in {row["id"] for row in data})
    r = client.delete(f"{P}/projects/{last.id}", headers={**auth(raw), "X-Confirm-Delete": "true"})
    assert r.status_code == 204
    data, meta = page(client, raw, f"{P}/projects", limit=2, cursor=meta["next_cursor"])
    assert (data, meta["total"], meta["has_more"]) == ([], 2, False)


def test_total_of_another_list(client, world):
    org = world.org()
    for _ in range(3):
        world.server(org)
    world.server()  # a shared server, if the key's list shows them
    raw, _ = world.key(org, "read_only")
    first, meta = page(client, raw, f"{P}/servers", limit=1)
    total = meta["total"]
    assert total >= 3
    seen = len(first)
    while meta["has_more"]:
        data, meta = page(client, raw, f"{P}/servers", limit=1, cursor=meta["next_cursor"])
        assert meta["total"] == total
        seen += len(data)
    assert seen == total


def test_an_empty_page_read_by_a_statement_that_has_found_rows(client, world):
    """Once a page's statement has found rows (SQLite then reads them in one step,
    compiled.Compiled), a page with none is still empty with a total of 0: the
    servers list (rows as dicts) and the projects list (rows rendered once)."""
    full, empty = world.org(), world.org()
    world.project(full, world.server(full))
    raw, _ = world.key(full, "read_only")
    none_raw, _ = world.key(empty, "read_only")
    nothing = {"data": [], "pagination": {"has_more": False, "next_cursor": None, "total": 0}}
    for path in (f"{P}/servers", f"{P}/projects"):
        for _ in range(2):
            assert page(client, raw, path)[1]["total"] >= 1
            r = client.get(path, headers=auth(none_raw))
            assert (r.status_code, r.json) == (200, nothing), path
