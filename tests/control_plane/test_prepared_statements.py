"""PostgreSQL: the hot statements (the key check, list pages) are prepared once per
connection and then run by name; with CP_DATABASE_PREPARED_STATEMENTS off (a pooler
in transaction mode between) they run as plain statements. Both answer the same."""

import pytest

from control_plane.app import create_app
from control_plane.models import ALL_MODELS
from tests.conftest import World, auth

P = "/api/public/v1"


@pytest.fixture(params=[True, False], ids=["prepared", "plain"])
def pg_app(request, pg_url, tmp_path):
    application = create_app({"DATA_DIR": str(tmp_path / "data"), "SECRET_KEY": "test-secret",
                              "PROXY_IMAGE": "", "DATABASE_URL": pg_url,
                              "DATABASE_PREPARED_STATEMENTS": request.param})
    db = application.extensions["berth"].db
    db.execute_sql("TRUNCATE " + ", ".join(f'"{m._meta.table_name}"' for m in ALL_MODELS)
                   + " CASCADE")
    db.execute_sql("DEALLOCATE ALL")  # this thread's connection, as another test left it
    yield application, request.param
    db.close_all()


def _prepared_here(db):
    """Statements prepared on this thread's connection (the test client's requests
    run on the test's own thread, so on the same pooled connection)."""
    rows = db.execute_sql("SELECT name, statement FROM pg_prepared_statements").fetchall()
    return {name: text for name, text in rows if name.startswith("berth_")}


def test_list_and_key_check_statements_prepared_once_per_connection(pg_app):
    app, prepared = pg_app
    world, client = World(app), app.test_client()
    org = world.org()
    server = world.server(org)
    made = {str(world.project(org, server).id) for _ in range(3)}
    raw, _ = world.key(org, "read_only")
    for _ in range(4):  # the key is remembered after the first; checked on every request
        r = client.get(f"{P}/projects", headers=auth(raw))
        assert r.status_code == 200 and {row["id"] for row in r.json["data"]} == made
        r = client.get(f"{P}/projects/{sorted(made)[0]}", headers=auth(raw))
        assert r.status_code == 200
    statements = _prepared_here(app.extensions["berth"].db)
    if not prepared:
        assert statements == {}
        return
    texts = " ".join(statements.values())
    assert '"project"' in texts and '"api_key"' in texts  # the page, the key's reads
    assert len(statements) == len(set(statements.values()))  # each text prepared once


def test_the_event_outbox_insert_is_prepared_once_per_connection(pg_app):
    """Every change records an event by one fixed INSERT (`BaseModel.add`): prepared
    once, then run by name, and the rows it writes are whole in both modes."""
    app, prepared = pg_app
    world, client = World(app), app.test_client()
    org = world.org()
    project = world.project(org, world.server(org))
    raw, _ = world.key(org)
    for name in ("a", "b", "c"):
        r = client.post(f"{P}/projects/{project.id}/environments", headers=auth(raw),
                        json={"name": name})
        assert r.status_code == 201, r.json
    db = app.extensions["berth"].db
    rows = db.execute_sql("SELECT organization_id, project_id, data FROM event "
                          "WHERE name = 'environment.created' ORDER BY created_at").fetchall()
    assert [(str(o), str(p)) for o, p, _ in rows] == [(str(org.id), str(project.id))] * 3
    assert [d for _, _, d in rows][0].startswith('{"environment_id":')
    inserts = [t for t in _prepared_here(db).values() if ' AS INSERT INTO "event" ' in t]
    assert len(inserts) == (1 if prepared else 0)
