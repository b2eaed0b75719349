"""Builds: a push's tests in a throwaway environment (services/automation/builds.py)."""
from peewee import *
import uuid


def up(migrator, db):
    class Organization(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'organization'

    class Project(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'project'

    class Build(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization, on_delete='CASCADE', index=False)
        project = ForeignKeyField(Project, on_delete='CASCADE', index=False)
        rule_id = UUIDField(null=True)
        run_id = UUIDField(null=True, index=True)
        branch = CharField(max_length=255)
        commit = CharField(max_length=64, null=True)
        base_commit = CharField(max_length=64, null=True)
        status = CharField(max_length=16)
        stage = CharField(max_length=16, null=True)
        environment_id = UUIDField(null=True)
        server_id = UUIDField(null=True)
        modules = TextField(null=True)
        tests = TextField(null=True)
        counts = TextField(null=True)
        log = TextField(null=True)
        reason = TextField(null=True)
        started_at = DateTimeField(null=True)
        finished_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'build'
            indexes = ((('project', 'created_at', 'id'), False),
                       (('server_id', 'status'), False))

    db.create_tables([Build])


def down(migrator, db):
    db.execute_sql('DROP TABLE build')
