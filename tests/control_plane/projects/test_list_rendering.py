"""The projects list shows each row as rendered once and then remembered by the
row's raw form (compiled.Shown): it must answer exactly what the project's own
endpoint answers (the schema's dump, done anew), and a row changed in any way,
through the API or not, must be shown changed on the next read."""

import datetime as dt

from control_plane.models import Project
from tests.conftest import auth

P = "/api/public/v1"


def listed(client, raw, **query):
    r = client.get(f"{P}/projects", headers=auth(raw), query_string=query)
    assert r.status_code == 200, r.json
    return r.json


def one(client, raw, project_id):
    r = client.get(f"{P}/projects/{project_id}", headers=auth(raw))
    assert r.status_code == 200, r.json
    return r.json


def test_listed_rows_are_what_each_project_answers(client, world):
    org = world.org()
    server = world.server(org)
    made = [world.project(org, server, name=name) for name in (
        'Ünïcødé ✓ "quoted" \\ back', "tab\there, a record\x1eseparator", "emoji 🚀", "plain")]
    world.environment(made[0])
    world.environment(made[0], active=False)
    # A time on a whole second, one a microsecond before the next, and a URL
    # stored with credentials before they were refused (shown without them).
    base = dt.datetime(2026, 1, 2, 3, 4, 5)
    for i, (project, created) in enumerate(zip(made, (
            base, base + dt.timedelta(microseconds=999999), base + dt.timedelta(seconds=2),
            base + dt.timedelta(seconds=3, microseconds=1000)), strict=True)):
        Project.update(created_at=created, erp_version="17.0" if i % 2 else None,
                       git_repo_url="https://user:secret@git.example.com/r.git" if i == 1
                       else None).where(Project.id == project.id).execute()
    raw, _ = world.key(org, "read_only")
    for _ in range(2):  # rendered, then remembered
        body = listed(client, raw)
        assert [row["id"] for row in body["data"]] == [str(p.id) for p in made]
        assert body["data"] == [one(client, raw, p.id) for p in made]
    shown = body["data"]
    assert shown[0]["environment_count"] == 1
    assert shown[0]["created_at"] == "2026-01-02T03:04:05.000Z"
    assert shown[1]["created_at"] == "2026-01-02T03:04:05.999Z"
    assert shown[1]["git_repo_url"] == "https://git.example.com/r.git"
    assert shown[2]["name"] == "emoji 🚀"

    first = listed(client, raw, limit=2)  # a cursor from a remembered row
    rest = listed(client, raw, limit=2, cursor=first["pagination"]["next_cursor"])
    assert first["data"] + rest["data"] == shown
    assert rest["pagination"] == {"has_more": False, "next_cursor": None, "total": 4}


def test_a_changed_row_is_shown_changed(client, world):
    org = world.org()
    server = world.server(org)
    project = world.project(org, server, name="before")
    raw, _ = world.key(org, "full_access")
    assert listed(client, raw)["data"][0]["name"] == "before"

    r = client.patch(f"{P}/projects/{project.id}", headers=auth(raw), json={"name": "after"})
    assert r.status_code == 200
    assert listed(client, raw)["data"] == [r.json]

    Project.update(default_branch="stable").where(Project.id == project.id).execute()
    assert listed(client, raw)["data"][0]["default_branch"] == "stable"

    world.environment(project)  # a count of another table's rows
    assert listed(client, raw)["data"][0]["environment_count"] == 1

    other = world.project(org, server, name="second")
    body = listed(client, raw)
    assert [row["name"] for row in body["data"]] == ["after", "second"]
    assert body["pagination"]["total"] == 2
    r = client.delete(f"{P}/projects/{other.id}", headers={**auth(raw), "X-Confirm-Delete": "true"})
    assert r.status_code == 204
    assert [row["name"] for row in listed(client, raw)["data"]] == ["after"]
