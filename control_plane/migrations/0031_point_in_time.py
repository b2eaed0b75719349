"""Point-in-time restores: a WAL file's time as PostgreSQL finished it, and
filestore files archived beside the WAL (their names are longer)."""
from peewee import *


def up(migrator, db):
    if not isinstance(getattr(db, 'obj', db), SqliteDatabase):  # SQLite does not bound a VARCHAR's length
        db.execute_sql('ALTER TABLE wal_file ALTER COLUMN name TYPE VARCHAR(100)')
    migrator.migrate(
        migrator.add_column('wal_file', 'archived_at', DateTimeField(null=True)),
        migrator.add_column('wal_file', 'path', CharField(max_length=1024, null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('wal_file', 'archived_at'),
                     migrator.drop_column('wal_file', 'path'))
