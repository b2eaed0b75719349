"""Servers reached over SSH (gateway/ssh.py): how a server is reached, its SSH
address and pinned host key, the last check; and each organization's SSH key."""
from peewee import *
import uuid


def up(migrator, db):
    class Organization(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'organization'

    class OrgSshKey(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization, unique=True)
        public_key = TextField()
        private_key_sealed = TextField()
        class Meta:
            database = db
            table_name = 'org_ssh_key'

    db.create_tables([OrgSshKey])
    migrator.migrate(
        migrator.add_column('server', 'connection', CharField(max_length=8, default='agent')),
        migrator.add_column('server', 'ssh_host', CharField(max_length=255, null=True)),
        migrator.add_column('server', 'ssh_port', IntegerField(null=True)),
        migrator.add_column('server', 'ssh_username', CharField(max_length=64, null=True)),
        migrator.add_column('server', 'ssh_host_key', TextField(null=True)),
        migrator.add_column('server', 'ssh_offered_host_key', TextField(null=True)),
        migrator.add_column('server', 'ssh_checked_at', DateTimeField(null=True)),
        migrator.add_column('server', 'ssh_claimed_at', DateTimeField(null=True)),
        migrator.add_column('server', 'unreachable_since', DateTimeField(null=True)),
        migrator.add_column('server', 'ssh_error', CharField(max_length=500, null=True)),
    )


def down(migrator, db):
    migrator.migrate(*[migrator.drop_column('server', c) for c in (
        'connection', 'ssh_host', 'ssh_port', 'ssh_username', 'ssh_host_key',
        'ssh_offered_host_key', 'ssh_checked_at', 'ssh_claimed_at', 'unreachable_since', 'ssh_error')])
    migrator.migrate(migrator.drop_table('org_ssh_key'))
