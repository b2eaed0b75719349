"""An environment's archived WAL files (protocol/wal.py; services/backups/wal.py)."""

import peewee

from control_plane.models.base import BaseModel, DateTimeField
from control_plane.models.environment import Environment


class WalFile(BaseModel):
    environment = peewee.ForeignKeyField(Environment, backref="wal_files", on_delete="CASCADE")
    name = peewee.CharField(max_length=64)  # the object: <WAL file name>.zst or .gz
    key = peewee.CharField(max_length=512)  # where storage holds it, made here
    upload_id = peewee.CharField(max_length=1024, null=True)  # while its upload is open
    size = peewee.BigIntegerField(null=True)
    sha256 = peewee.CharField(max_length=64, null=True)
    stored_at = DateTimeField(null=True, index=True)  # read back and checked

    class Meta:
        indexes = ((("environment", "name"), True),)
