"""Filestore objects, once per project: the packs in storage, the objects each
holds, and the packs each backup needs (services/backups/objects.py)."""
from peewee import *
import uuid


def up(migrator, db):
    class Project(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'project'

    class Backup(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'backup'

    class FilestorePack(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        project = ForeignKeyField(Project)
        name = CharField(max_length=64)
        key = CharField(max_length=512)
        backup = ForeignKeyField(Backup, null=True, on_delete='SET NULL')
        size = BigIntegerField()
        sha256 = CharField(max_length=64)
        objects = IntegerField()
        deleted_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'filestore_pack'
            indexes = ((('project', 'name'), True),)

    class FilestoreObject(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        project = ForeignKeyField(Project)
        sha256 = CharField(max_length=64)
        size = BigIntegerField()
        pack = ForeignKeyField(FilestorePack, on_delete='CASCADE')
        class Meta:
            database = db
            table_name = 'filestore_object'
            indexes = ((('project', 'sha256'), False),)

    class BackupPack(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        backup = ForeignKeyField(Backup, on_delete='CASCADE')
        pack = ForeignKeyField(FilestorePack, on_delete='CASCADE')
        class Meta:
            database = db
            table_name = 'backup_pack'
            indexes = ((('backup', 'pack'), True),)

    db.create_tables([FilestorePack, FilestoreObject, BackupPack])


def down(migrator, db):
    for table in ('backup_pack', 'filestore_object', 'filestore_pack'):
        db.execute_sql(f'DROP TABLE {table}')
