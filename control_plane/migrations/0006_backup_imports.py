"""Imports: files uploaded to be restored into an environment (Odoo's backup
zip or a bare dump), their storage key and multipart upload, and their restore."""
from peewee import *
import uuid


def up(migrator, db):
    class Environment(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'environment'

    class Deployment(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'deployment'

    class BackupImport(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        environment = ForeignKeyField(Environment)
        status = CharField(max_length=16, default='uploading')
        filename = CharField(max_length=255, null=True)
        storage_key = CharField(max_length=512)
        upload_id = CharField(max_length=1024, null=True)
        size = BigIntegerField(null=True)
        created_by = UUIDField(null=True)
        task = ForeignKeyField(Deployment, null=True)
        uploaded_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'backup_import'
    db.create_tables([BackupImport])


def down(migrator, db):
    migrator.migrate(migrator.drop_table('backup_import'))
