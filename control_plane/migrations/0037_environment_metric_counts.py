"""The metric history keeps what the disk measurement counts beside the sizes: the
filestore's files, attachments whose file is missing, files no attachment names."""
from peewee import *

SERIES = ("filestore_files", "attachments_missing", "files_orphaned")


def _columns():
    return [(f"{s}{end}", FloatField(null=True)) for s in SERIES for end in ("", "_min", "_max")]


def up(migrator, db):
    migrator.migrate(*[migrator.add_column('environment_metric', name, field)
                       for name, field in _columns()])


def down(migrator, db):
    migrator.migrate(*[migrator.drop_column('environment_metric', name)
                       for name, _ in _columns()])
