import peewee

from control_plane.models.base import BaseModel, DateTimeField
from control_plane.models.environment import Environment
from control_plane.states import BackupStatus


class Backup(BaseModel):
    environment = peewee.ForeignKeyField(Environment, backref="backups")
    status = peewee.CharField(max_length=16, default=BackupStatus.PENDING, index=True)
    backup_type = peewee.CharField(max_length=16, default="manual")
    database_size = peewee.BigIntegerField(default=0)
    filestore_size = peewee.BigIntegerField(default=0)
    total_size = peewee.BigIntegerField(default=0)
    compressed_size = peewee.BigIntegerField(default=0)
    started_at = DateTimeField(null=True)
    completed_at = DateTimeField(null=True)
    duration_seconds = peewee.IntegerField(null=True)
    expires_at = DateTimeField(null=True)
    is_verified = peewee.BooleanField(default=False)
    verified_at = DateTimeField(null=True)
    notes = peewee.TextField(null=True)
    error_message = peewee.TextField(null=True)
    storage_key = peewee.CharField(max_length=512, null=True)
