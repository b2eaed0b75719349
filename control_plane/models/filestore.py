"""A project's filestore objects (the `objects` layout, protocol/filestore_objects.py):
the packs in storage, the objects each holds (as the control plane found them
when it read the pack back), and the packs each backup's filestore needs."""

import peewee

from control_plane.models.backup import Backup
from control_plane.models.base import BaseModel, DateTimeField
from control_plane.models.project import Project


class FilestorePack(BaseModel):
    project = peewee.ForeignKeyField(Project, backref="filestore_packs")
    name = peewee.CharField(max_length=64)  # the agent's: packs/<uuid>.tar.zst
    key = peewee.CharField(max_length=512)  # where storage holds it, made here
    backup = peewee.ForeignKeyField(Backup, null=True, on_delete="SET NULL")  # the uploader
    size = peewee.BigIntegerField()
    sha256 = peewee.CharField(max_length=64)
    objects = peewee.IntegerField()
    deleted_at = DateTimeField(null=True)  # removed from storage: no longer offered

    class Meta:
        indexes = ((("project", "name"), True),)


class FilestoreObject(BaseModel):
    project = peewee.ForeignKeyField(Project, backref="filestore_objects")
    sha256 = peewee.CharField(max_length=64)
    size = peewee.BigIntegerField()
    pack = peewee.ForeignKeyField(FilestorePack, backref="members", on_delete="CASCADE")

    class Meta:
        indexes = ((("project", "sha256"), False),)


class BackupPack(BaseModel):
    backup = peewee.ForeignKeyField(Backup, backref="packs", on_delete="CASCADE")
    pack = peewee.ForeignKeyField(FilestorePack, backref="backups", on_delete="CASCADE")

    class Meta:
        indexes = ((("backup", "pack"), True),)
