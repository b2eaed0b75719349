"""Shell sessions into environments (services/servers/shells.py)."""
from peewee import *
import uuid


def up(migrator, db):
    class Organization(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'organization'

    class Environment(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'environment'

    class ShellSession(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization, on_delete='CASCADE', index=False)
        environment = ForeignKeyField(Environment, on_delete='CASCADE', index=False)
        server_id = UUIDField()
        actor_type = CharField(max_length=16)
        actor_id = CharField(max_length=64, null=True)
        actor_name = CharField(max_length=255, null=True)
        source_ip = CharField(max_length=64, null=True)
        odoo = BooleanField(default=False)
        command = TextField(null=True)
        tty = BooleanField(default=True)
        ticket_hash = CharField(max_length=64, null=True, unique=True)
        expires_at = DateTimeField()
        started_at = DateTimeField(null=True)
        seen_at = DateTimeField(null=True)
        ended_at = DateTimeField(null=True)
        exit_code = IntegerField(null=True)
        end_reason = CharField(max_length=32, null=True)
        transcript = TextField(null=True)
        transcript_truncated = BooleanField(default=False)
        class Meta:
            database = db
            table_name = 'shell_session'
            indexes = ((('environment', 'created_at', 'id'), False),
                       (('server_id', 'ended_at'), False))

    db.create_tables([ShellSession])


def down(migrator, db):
    db.execute_sql('DROP TABLE shell_session')
