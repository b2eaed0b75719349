"""Custom domains of environments: a host name (unique across organizations),
the token its TXT record must hold, and whether DNS has shown it."""
from peewee import *
import uuid


def up(migrator, db):
    class Environment(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'environment'

    class CustomDomain(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        environment = ForeignKeyField(Environment, on_delete='CASCADE')
        name = CharField(max_length=253, unique=True)
        token = CharField(max_length=64)
        status = CharField(max_length=16, default='pending')
        verified_at = DateTimeField(null=True)
        checked_at = DateTimeField(null=True)
        check_error = TextField(null=True)
        class Meta:
            database = db
            table_name = 'custom_domain'
    db.create_tables([CustomDomain])


def down(migrator, db):
    migrator.migrate(migrator.drop_table('custom_domain'))
