"""Schema migrations: idempotent, data-preserving, and in step with the models."""

import shutil
import subprocess
import sys
from pathlib import Path

import peewee
import pytest
from playhouse.migrations import Runner
from playhouse.schema_diff import diff_models

from control_plane import migrate
from control_plane.models import ALL_MODELS

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
