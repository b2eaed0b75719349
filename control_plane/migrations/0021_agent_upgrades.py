"""Agent upgrades (services/servers/upgrades.py): each request to move a server's
resident agent to the control plane's version, and how it went."""
from peewee import *
import uuid


def up(migrator, db):
    class Server(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'server'

    class AgentUpgrade(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        server = ForeignKeyField(Server, on_delete='CASCADE')
        to_version = CharField(max_length=32)
        from_version = CharField(max_length=32, null=True)
        status = CharField(max_length=16, default='queued', index=True)
        command = UUIDField(null=True)
        error = CharField(max_length=500, null=True)
        sent_at = DateTimeField(null=True)
        finished_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'agent_upgrade'

    db.create_tables([AgentUpgrade])


def down(migrator, db):
    db.execute_sql('DROP TABLE agent_upgrade')
