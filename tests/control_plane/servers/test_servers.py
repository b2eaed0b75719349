"""GET /servers: own plus shared servers, environment counts of the key's
organization only, project-scoped visibility, cursor pages."""

import pytest

from tests.conftest import auth

SERVERS = "/api/public/v1/servers"
SERVER_KEYS = {"id", "name", "provider", "region", "cpu_cores", "ram_mb", "disk_gb",
               "environment_count", "connected", "last_seen_at", "connection", "reachable",
               "unreachable_since", "agent_version", "agent_behind", "ssh"}
AGENT_NEVER_CONNECTED = {"connected": False, "last_seen_at": None, "connection": "agent",
                         "reachable": False, "unreachable_since": None, "agent_version": None,
                         "agent_behind": None, "ssh": None}


def listing(client, raw, **params):
    r = client.get(SERVERS, headers=auth(raw), query_string={"limit": 100, **params})
    assert r.status_code == 200, r.json
    return r.json


def by_id(body):
    return {s["id"]: s for s in body["data"]}


def test_own_and_shared_servers_never_another_organizations(client, world):
    org, other = world.org(), world.org()
    own = [world.server(org), world.server(org)]
    shared = world.server(None)
    theirs = world.server(other)
    raw, _ = world.key(org, "read_only")
    body = listing(client, raw)
    assert set(by_id(body)) == {str(s.id) for s in (*own, shared)}
    assert body["pagination"] == {"has_more": False, "next_cursor": None, "total": 3}
    # The other organization sees its own and the shared one.
    raw_other, _ = world.key(other, "read_only")
    assert set(by_id(listing(client, raw_other))) == {str(theirs.id), str(shared.id)}


def test_server_fields(client, world):
    from control_plane.services.servers import servers
    org = world.org()
    s = servers.create_server(name="db-1", provider="hetzner", region="fsn1", cpu_cores=8,
                              ram_mb=32768, disk_gb=500, org_id=org.id)
    s.hostname = "10.1.2.3"
    s.agent_credential_hash = "f" * 64
    s.save()
    raw, _ = world.key(org, "read_only")
    r = client.get(SERVERS, headers=auth(raw))
    assert set(r.json) == {"data", "pagination"}
    [entry] = r.json["data"]
    assert entry == {"id": str(s.id), "name": "db-1", "provider": "hetzner", "region": "fsn1",
                     "cpu_cores": 8, "ram_mb": 32768, "disk_gb": 500, "environment_count": 0,
                     **AGENT_NEVER_CONNECTED}
    text = r.get_data(as_text=True)
    assert "10.1.2.3" not in text and "f" * 64 not in text


def test_region_may_be_null(client, world):
    org = world.org()
    world.server(org)
    raw, _ = world.key(org, "read_only")
    [entry] = listing(client, raw)["data"]
    assert set(entry) == SERVER_KEYS
    assert entry["region"] is None


def test_deleted_servers_are_not_listed(client, world, fake_clock):
    from control_plane.models import Server
    org = world.org()
    kept, gone = world.server(org), world.server(org)
    gone_shared = world.server(None)
    Server.update(deleted_at=fake_clock.now).where(
        Server.id.in_([gone.id, gone_shared.id])).execute()
    raw, _ = world.key(org, "read_only")
    body = listing(client, raw)
    assert set(by_id(body)) == {str(kept.id)}
    assert body["pagination"]["total"] == 1


def test_environment_count_counts_active_environments_of_own_organization(client, world):
    org, other = world.org(), world.org()
    own = world.server(org)
    shared = world.server(None)
    idle = world.server(org)
    project = world.project(org, server=own)
    world.environment(project)
    world.environment(project, status="stopped")
    world.environment(project, active=False)  # destroyed: not counted
    world.environment(project, server=shared)
    # Another organization's environments on the shared server are not ours to count.
    their_project = world.project(other, server=shared)
    for _ in range(3):
        world.environment(their_project)
    raw, _ = world.key(org, "read_only")
    counts = {k: v["environment_count"] for k, v in by_id(listing(client, raw)).items()}
    assert counts == {str(own.id): 2, str(shared.id): 1, str(idle.id): 0}
    raw_other, _ = world.key(other, "read_only")
    counts_other = {k: v["environment_count"]
                    for k, v in by_id(listing(client, raw_other)).items()}
    assert counts_other[str(shared.id)] == 3


def test_environments_of_deleted_projects_are_not_counted(client, world, fake_clock):
    from control_plane.models import Project
    org = world.org()
    server = world.server(org)
    live, deleted = world.project(org, server=server), world.project(org, server=server)
    world.environment(live)
    world.environment(deleted)
    Project.update(deleted_at=fake_clock.now).where(Project.id == deleted.id).execute()
    raw, _ = world.key(org, "read_only")
    [entry] = listing(client, raw)["data"]
    assert entry["environment_count"] == 1


def test_project_scoped_key_sees_only_servers_hosting_its_project(client, world):
    org = world.org()
    home = world.server(org)
    project = world.project(org, server=home)
    env_host = world.server(org)
    world.environment(project, server=env_host)
    shared_host = world.server(None)
    world.environment(project, server=shared_host)
    old_host = world.server(org)
    world.environment(project, server=old_host, active=False)  # no longer hosts it
    world.server(None)  # shared, unrelated
    world.server(org)  # unrelated
    world.project(org)  # another project with its own server
    other_org = world.org()
    foreign = world.server(other_org)
    world.environment(world.project(other_org, server=foreign))

    raw, _ = world.key(org, "read_only", scope="project", project=project)
    body = listing(client, raw)
    assert set(by_id(body)) == {str(home.id), str(env_host.id), str(shared_host.id)}
    assert body["pagination"]["total"] == 3
    # The organization-scoped view has them all (4 own servers + project server + 2 shared).
    raw_org, _ = world.key(org, "read_only")
    assert listing(client, raw_org)["pagination"]["total"] == 7


def test_project_scoped_key_for_project_without_server_or_environments(client, world):
    from control_plane.models import Project
    org = world.org()
    world.server(org)
    world.server(None)
    project = Project.create(organization=org, name="bare", server=None)
    raw, _ = world.key(org, "read_only", scope="project", project=project)
    assert listing(client, raw) == {"data": [], "pagination": {
        "has_more": False, "next_cursor": None, "total": 0}}


@pytest.mark.parametrize("same_instant", [False, True], ids=["distinct-times", "same-time"])
def test_cursor_pages_over_25_servers(client, world, fake_clock, same_instant):
    org, other = world.org(), world.org()
    made = []
    for i in range(25):
        made.append(world.server(org if i % 5 else None, name=f"s{i:02d}"))
        world.server(other)
        if not same_instant:
            fake_clock.advance(seconds=1)
    raw, _ = world.key(org, "read_only")
    ids, pages, cursor = [], [], None
    while True:
        params = {"limit": 10, **({"cursor": cursor} if cursor else {})}
        r = client.get(SERVERS, headers=auth(raw), query_string=params)
        assert r.status_code == 200
        pages.append(r.json)
        ids += [s["id"] for s in r.json["data"]]
        cursor = r.json["pagination"]["next_cursor"]
        if not r.json["pagination"]["has_more"]:
            break
        assert len(pages) < 10
    assert [len(p["data"]) for p in pages] == [10, 10, 5]
    assert [p["pagination"]["has_more"] for p in pages] == [True, True, False]
    assert all(p["pagination"]["total"] == 25 for p in pages)
    assert pages[-1]["pagination"]["next_cursor"] is None
    assert len(ids) == len(set(ids)) == 25
    assert set(ids) == {str(s.id) for s in made}
    if not same_instant:  # oldest first
        assert ids == [str(s.id) for s in made]


def test_default_page_size_is_20_and_limit_bounds(client, world):
    org = world.org()
    for _ in range(21):
        world.server(org)
    raw, _ = world.key(org, "read_only")
    body = client.get(SERVERS, headers=auth(raw)).json
    assert len(body["data"]) == 20 and body["pagination"]["has_more"] is True
    for limit in (0, 101):
        r = client.get(SERVERS, headers=auth(raw), query_string={"limit": limit})
        assert r.status_code == 422 and r.json["error"] == "validation_error"


def test_foreign_or_garbage_cursor_is_400(client, world):
    from control_plane.services.support import tickets
    org = world.org()
    for i in range(2):
        world.server(org)
        tickets.create_ticket(org_id=org.id, subject=f"t{i}", description="d")
    raw, _ = world.key(org, "read_only", support_tickets=True)
    ticket_cursor = client.get("/api/public/v1/support/tickets", headers=auth(raw),
                               query_string={"limit": 1}).json["pagination"]["next_cursor"]
    assert ticket_cursor
    for cursor in (ticket_cursor, "garbage"):
        r = client.get(SERVERS, headers=auth(raw), query_string={"cursor": cursor})
        assert r.status_code == 400 and r.json["error"] == "invalid_cursor"


def test_project_scoped_key_counts_only_its_project_environments(client, world):
    org = world.org()
    server = world.server(org)
    mine, other = world.project(org, server), world.project(org, server)
    world.environment(mine, "running")
    world.environment(other, "running")
    world.environment(other, "stopped")
    raw_org, _ = world.key(org, "read_only")
    raw_project, _ = world.key(org, "read_only", scope="project", project=mine)
    by_org = client.get("/api/public/v1/servers", headers=auth(raw_org)).json["data"]
    by_project = client.get("/api/public/v1/servers", headers=auth(raw_project)).json["data"]
    assert [s["environment_count"] for s in by_org if s["id"] == str(server.id)] == [3]
    assert [(s["id"], s["environment_count"]) for s in by_project] == [(str(server.id), 1)]


def test_an_agent_older_than_the_control_plane_is_shown_behind(client, world):
    from control_plane import __version__
    from control_plane.models import Server
    org = world.org()
    old, same = world.server(org, name="old"), world.server(org, name="same")
    Server.update(agent_version="0.1.0").where(Server.id == old.id).execute()
    Server.update(agent_version=__version__).where(Server.id == same.id).execute()
    raw, _ = world.key(org, "read_only")
    rows = {s["name"]: s for s in listing(client, raw)["data"]}
    assert (rows["old"]["agent_version"], rows["old"]["agent_behind"]) == ("0.1.0", True)
    assert rows["same"]["agent_behind"] is False
