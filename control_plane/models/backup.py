import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.environment import Deployment, Environment
from control_plane.vocabulary.states import BackupStatus, ImportStatus


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
    # The task (kind `backup`, or the `restore` a safety backup belongs to).
    task = peewee.ForeignKeyField(Deployment, null=True, backref="backups")
    # Where its objects are: `<storage_prefix><object name>`, made by the control plane.
    storage_prefix = peewee.CharField(max_length=512, null=True)
    manifest = JSONField(null=True)
    parts = JSONField(default=dict)  # object name -> {size, sha256}, once uploaded
    uploads = JSONField(default=dict)  # object name -> multipart upload id, while uploading
    # A safety backup: the backup its restore restores (whose objects its agent reads).
    source_backup = peewee.ForeignKeyField("self", null=True, backref="safety_copies")
    deleted_at = DateTimeField(null=True)  # retention removed its objects: no longer listed

    class Meta:
        indexes = ((("environment", "created_at"), False),)  # an environment's newest


class BackupImport(BaseModel):
    """A file uploaded to be restored into an environment (Odoo's backup zip, a
    custom-format or a plain dump): `uploading` (parts go to storage), then
    `uploaded`, then restored by a `restore` task (`task`)."""

    environment = peewee.ForeignKeyField(Environment, backref="imports")
    status = peewee.CharField(max_length=16, default=ImportStatus.UPLOADING)
    filename = peewee.CharField(max_length=255, null=True)
    storage_key = peewee.CharField(max_length=512)  # made by the control plane
    upload_id = peewee.CharField(max_length=1024, null=True)  # while uploading
    size = peewee.BigIntegerField(null=True)  # once uploaded
    created_by = peewee.UUIDField(null=True)
    task = peewee.ForeignKeyField(Deployment, null=True, backref="imports")  # its restore
    uploaded_at = DateTimeField(null=True)
