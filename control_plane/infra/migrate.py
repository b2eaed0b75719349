"""Schema migrations: numbered scripts in control_plane/migrations, applied in
order and recorded in the `schema_migration` table (peewee's runner)."""

from pathlib import Path

from playhouse.migrations import Runner

MIGRATIONS_DIR = Path(__file__).parents[1] / "migrations"


def runner(db):
    return Runner(db, directory=str(MIGRATIONS_DIR))


def upgrade(db):
    """Apply every pending migration in order; returns their names. Safe to run twice."""
    with db.connection_context():
        return runner(db).up()


def pending(db):
    with db.connection_context():
        return [m.name for m in runner(db).status() if not m.applied and m.path]
