"""An environment's archived WAL files, and the filestore files archived beside them
(protocol/wal.py; services/backups/wal.py)."""

import peewee

from control_plane.models.base import BaseModel, DateTimeField
from control_plane.models.environment import Environment


class WalFile(BaseModel):
    environment = peewee.ForeignKeyField(Environment, backref="wal_files", on_delete="CASCADE")
    # The object: <system identifier>/<WAL file name>.zst or .gz, or files/<sha256>.zst
    name = peewee.CharField(max_length=100)
    key = peewee.CharField(max_length=512)  # where storage holds it, made here
    upload_id = peewee.CharField(max_length=1024, null=True)  # while its upload is open
    size = peewee.BigIntegerField(null=True)
    sha256 = peewee.CharField(max_length=64, null=True)
    stored_at = DateTimeField(null=True, index=True)  # read back and checked
    # A WAL file: when PostgreSQL finished it (its spool file's time; older agents
    # send none). A filestore file: its path in the ERP's data directory.
    archived_at = DateTimeField(null=True)
    path = peewee.CharField(max_length=1024, null=True)

    class Meta:
        indexes = ((("environment", "name"), True),)
