"""The audit log (services/audit.py): who changed what, through which surface."""
from peewee import *
import uuid


def up(migrator, db):
    class Organization(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'organization'

    class AuditEvent(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization, on_delete='CASCADE', index=False)
        actor_type = CharField(max_length=16)
        actor_id = CharField(max_length=64, null=True)
        actor_name = CharField(max_length=255, null=True)
        action = CharField(max_length=64)
        target_type = CharField(max_length=32)
        target_id = CharField(max_length=64, null=True)
        changes = TextField(null=True)
        source_ip = CharField(max_length=64, null=True)
        request_id = CharField(max_length=64, null=True)
        class Meta:
            database = db
            table_name = 'audit_event'
            indexes = ((('organization', 'created_at', 'id'), False),)

    db.create_tables([AuditEvent])


def down(migrator, db):
    db.execute_sql('DROP TABLE audit_event')
