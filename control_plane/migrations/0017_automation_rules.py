"""Automation rules of projects and their runs (services/automation)."""
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

    class AutomationRule(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization)
        project = ForeignKeyField(Project)
        name = CharField(max_length=100)
        enabled = BooleanField(default=True)
        trigger = TextField()
        action = TextField()
        trigger_type = CharField(max_length=16)
        watched_environment = UUIDField(null=True, index=True)
        next_run_at = DateTimeField(null=True, index=True)
        created_by = CharField(max_length=255, null=True)
        updated_at = DateTimeField(null=True)
        deleted_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'automation_rule'
            indexes = ((('project', 'trigger_type'), False),)

    class AutomationRun(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        rule = ForeignKeyField(AutomationRule, on_delete='CASCADE')
        trigger_type = CharField(max_length=16)
        branch = CharField(max_length=255, null=True)
        actor = CharField(max_length=255)
        status = CharField(max_length=16)
        reason = TextField(null=True)
        started_at = DateTimeField()
        finished_at = DateTimeField(null=True)
        environment_id = UUIDField(null=True)
        task = UUIDField(null=True, index=True)
        action_started = BooleanField(default=False)
        stage = CharField(max_length=16, null=True)
        backup_id = UUIDField(null=True)
        depth = IntegerField(default=0)
        class Meta:
            database = db
            table_name = 'automation_run'
            indexes = ((('rule', 'created_at', 'id'), False), (('status', 'action_started'), False))
    db.create_tables([AutomationRule, AutomationRun])


def down(migrator, db):
    migrator.migrate(migrator.drop_table('automation_run'), migrator.drop_table('automation_rule'))
