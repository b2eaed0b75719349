"""Backups as tasks: the Backup row's task, where its objects are stored, the
agent's manifest and object checksums, uploads in progress, a safety backup's
source, and retention's deletion mark."""
from peewee import *
import uuid


def up(migrator, db):
    class Deployment(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'deployment'

    class Backup(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'backup'

    migrator.migrate(
        migrator.add_column('backup', 'task_id', ForeignKeyField(Deployment, null=True,
                                                                 field=Deployment.id)),
        migrator.add_column('backup', 'storage_prefix', CharField(max_length=512, null=True)),
        migrator.add_column('backup', 'manifest', TextField(null=True)),
        migrator.add_column('backup', 'parts', TextField(default='{}')),
        migrator.add_column('backup', 'uploads', TextField(default='{}')),
        migrator.add_column('backup', 'source_backup_id', ForeignKeyField(Backup, null=True,
                                                                          field=Backup.id)),
        migrator.add_column('backup', 'deleted_at', DateTimeField(null=True)),
    )


def down(migrator, db):
    migrator.migrate(*(migrator.drop_column('backup', column) for column in (
        'task_id', 'storage_prefix', 'manifest', 'parts', 'uploads', 'source_backup_id',
        'deleted_at')))
