"""Schema migrations: idempotent, data-preserving, and in step with the models."""

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import peewee
import pytest
from playhouse.migrations import Runner
from playhouse.schema_diff import diff_models

from control_plane.app import create_app
from control_plane.infra import migrate, security
from control_plane.models import ALL_MODELS
from control_plane.models.api_key import KEY_PREFIX
from tests.conftest import auth

BERTH = str(Path(sys.executable).with_name("berth"))


def test_migrated_schema_matches_the_models(app):
    """A model change without a migration fails here (both backends)."""
    diff = diff_models(app.extensions["berth"].db, ALL_MODELS)
    assert not diff, str(diff)


def test_berth_migrate_is_safe_to_run_twice(tmp_path):
    env = {"CP_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    first = subprocess.run([BERTH, "migrate"], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([BERTH, "migrate"], env=env, capture_output=True, text=True, check=True)
    assert "0001_initial" in first.stdout
    assert "applied 0 migration(s)" in second.stdout
    assert (tmp_path / "berth.sqlite3").exists()


def test_upgrade_keeps_existing_data(tmp_path):
    """A database at an older schema gains a new migration without losing rows."""
    migrations = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS_DIR, migrations)
    db = peewee.SqliteDatabase(str(tmp_path / "old.sqlite3"))
    Runner(db, directory=str(migrations)).up()
    db.execute_sql("INSERT INTO organization (id, created_at, name, server_quota, ticket_seq) "
                   "VALUES ('0123456789abcdef0123456789abcdef', '2026-01-01 00:00:00', 'kept', 3, 0)")
    (migrations / "0099_add_note.py").write_text(
        "from peewee import TextField\n\n"
        "def up(migrator, db):\n"
        "    migrator.migrate(migrator.add_column('organization', 'note', TextField(default='')))\n")
    assert Runner(db, directory=str(migrations)).up() == ["0099_add_note"]
    assert db.execute_sql("SELECT name, server_quota, note FROM organization").fetchall() == [
        ("kept", 3, "")]
    assert Runner(db, directory=str(migrations)).up() == []


def test_sqlite_runs_in_wal_mode(app, backend):
    if backend != "sqlite":
        pytest.skip("SQLite only")
    db = app.extensions["berth"].db
    assert db.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute_sql("PRAGMA busy_timeout").fetchone()[0] >= 5000


def _rows_at_0001(db):
    """An organization, a server, a project and a full-access key, written against
    the 0001 tables (today's models may have moved on). Returns ids and the key."""
    ids = {name: uuid.uuid4().hex for name in ("org", "server", "project", "key")}
    raw = KEY_PREFIX["full_access"] + security.random_token(40)
    created = "2026-01-01 00:00:00"

    def insert(table, **row):
        peewee.Table(table).bind(db).insert(created_at=created, **row).execute()

    insert("organization", id=ids["org"], name="kept-org", server_quota=3, ticket_seq=0)
    insert("server", id=ids["server"], organization_id=ids["org"], name="kept-box",
           provider="hetzner", cpu_cores=4, ram_mb=8192, disk_gb=100)
    insert("project", id=ids["project"], organization_id=ids["org"], server_id=ids["server"],
           name="kept-project", default_branch="main")
    insert("api_key", id=ids["key"], public_id="key_0123456789abcdef", organization_id=ids["org"],
           name="old key", key_type="full_access", scope="organization", prefix=raw[:16],
           key_hash=security.digest(raw), server_registration=False, support_tickets=False)
    return ids, raw


def test_database_from_the_first_migration_upgrades_with_its_rows(tmp_path, backend, request):
    """An install made at 0001 with data in it, brought up to date by `berth migrate`:
    the rows stay and its API key still authenticates."""
    settings = {"DATA_DIR": str(tmp_path / "data"), "SECRET_KEY": "old-install"}
    if backend == "postgres":
        settings["DATABASE_URL"] = request.getfixturevalue("postgres").create_database(
            f"berth_0001_{uuid.uuid4().hex[:8]}")
    app = create_app(settings)  # configures the key digest; does not migrate
    db = app.extensions["berth"].db
    try:
        with db.connection_context():
            assert migrate.runner(db).up(target="0001_initial") == ["0001_initial"]
            ids, raw = _rows_at_0001(db)
        later = migrate.pending(db)
        assert later, "no migration after 0001: nothing to upgrade"

        env = {"PATH": "/usr/bin:/bin", **{f"CP_{k}": v for k, v in settings.items()}}
        proc = subprocess.run([BERTH, "migrate"], env=env, capture_output=True, text=True,
                              check=True)
        assert f"applied {len(later)} migration(s): {', '.join(later)}" in proc.stdout
        assert migrate.pending(db) == []

        r = app.test_client().get("/api/public/v1/projects", headers=auth(raw))
        assert r.status_code == 200, r.json
        assert r.headers["X-API-Key-Id"] == "key_0123456789abcdef"
        assert [(p["id"], p["name"], p["server_id"]) for p in r.json["data"]] == [
            (str(uuid.UUID(ids["project"])), "kept-project", str(uuid.UUID(ids["server"])))]
        with db.connection_context():
            assert db.execute_sql("SELECT name, server_quota FROM organization").fetchall() == [
                ("kept-org", 3)]
    finally:
        db.close_all() if hasattr(db, "close_all") else db.close()


def test_destroyed_environments_get_their_own_status(app, world):
    """0004: an inactive `pending` environment with a `destroyed` destroy record
    becomes `destroyed`; a never-deployed one, or one of a deleted project, stays."""
    import importlib

    from control_plane.models import Deployment, Environment

    step = importlib.import_module("control_plane.migrations.0004_environment_destroyed")
    db = app.extensions["berth"].db
    project = world.project(world.org())
    destroyed = world.environment(project, status="pending", active=False)
    Deployment.create(environment=destroyed, project=project, version=1, kind="destroy",
                      trigger="destroy", status="destroyed")
    never_deployed = world.environment(project, status="pending")
    of_deleted_project = world.environment(project, status="pending", active=False)
    deleted = world.environment(project, status="deleted", active=False)

    step.up(None, db)
    status = {e.id: e.status for e in Environment.select()}
    assert status[destroyed.id] == "destroyed"
    assert [status[e.id] for e in (never_deployed, of_deleted_project, deleted)] == [
        "pending", "pending", "deleted"]
    step.down(None, db)
    assert Environment.get_by_id(destroyed.id).status == "pending"



def test_tasks_that_are_not_deployments_lose_their_version(tmp_path, backend, request):
    """0012, through the runner on a database at 0011 holding tasks: backups,
    restores and exports took numbers from the deployments' counter and have none
    after it; deployments keep theirs (gaps included), their log lines stay. Down
    numbers them again after each environment's highest."""
    from control_plane.models import Deployment, Environment, TaskLogLine

    settings = {"DATA_DIR": str(tmp_path / "data"), "SECRET_KEY": "old-install"}
    if backend == "postgres":
        settings["DATABASE_URL"] = request.getfixturevalue("postgres").create_database(
            f"berth_0012_{uuid.uuid4().hex[:8]}")
    app = create_app(settings)
    db = app.extensions["berth"].db
    try:
        with db.connection_context():
            migrate.runner(db).up(target="0011_task_time_limit")
            ids, _ = _rows_at_0001(db)
            env = Environment.create(project=uuid.UUID(ids["project"]), name="e",
                                     status="running", branch="main")
            kinds = ("deploy", "backup", "restore", "redeploy", "export")
            rows = [Deployment.create(environment=env, project=env.project_id, version=n,
                                      kind=kind, trigger="manual", status="success")
                    for n, kind in enumerate(kinds, 1)]
            TaskLogLine.create(deployment=rows[0], seq=1, level="info", message="kept")
            assert migrate.runner(db).up(target="0012_task_versions") == ["0012_task_versions"]
            def versions():  # read alone: later columns are not there yet
                return [Deployment.select(Deployment.version).where(Deployment.id == d.id)
                        .scalar() for d in rows]

            assert versions() == [1, None, None, 4, None]
            assert [m for (m,) in TaskLogLine.select(TaskLogLine.message).tuples()] == ["kept"]
            assert migrate.runner(db).down() == ["0012_task_versions"]
            after = versions()
            assert after[0::3] == [1, 4] and sorted(after[1:3] + after[4:]) == [5, 6, 7]
    finally:
        db.close_all() if hasattr(db, "close_all") else db.close()


def test_users_keep_their_second_factor_across_0025(tmp_path, backend, request):
    """0025, through the runner on a database at 0024: a user's sealed TOTP secret
    stays, with no step taken yet (their next code is accepted); down drops the
    column alone."""
    settings = {"DATA_DIR": str(tmp_path / "data"), "SECRET_KEY": "old-install"}
    if backend == "postgres":
        settings["DATABASE_URL"] = request.getfixturevalue("postgres").create_database(
            f"berth_0025_{uuid.uuid4().hex[:8]}")
    db = create_app(settings).extensions["berth"].db
    user = peewee.Table("user").bind(db)
    try:
        with db.connection_context():
            migrate.runner(db).up(target="0024_console_sign_in")
            org, created = uuid.uuid4().hex, "2026-01-01 00:00:00"
            peewee.Table("organization").bind(db).insert(
                id=org, created_at=created, name="o", server_quota=1, ticket_seq=0).execute()
            user.insert(id=uuid.uuid4().hex, created_at=created, organization_id=org, name="u",
                        email="u@example.com", permissions="[]", access="full_access",
                        totp_secret="sealed").execute()
            assert migrate.runner(db).up(target="0025_totp_last_step") == ["0025_totp_last_step"]
            assert db.execute_sql('SELECT totp_secret, totp_last_step FROM "user"').fetchall() == [
                ("sealed", None)]
            assert migrate.runner(db).down() == ["0025_totp_last_step"]
            assert db.execute_sql('SELECT totp_secret FROM "user"').fetchall() == [("sealed",)]
    finally:
        db.close_all() if hasattr(db, "close_all") else db.close()
