"""Deploy on git push: add-on repositories, per-project webhook secrets, handled deliveries."""
from peewee import *
import uuid


def up(migrator, db):
    class Project(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'project'

    class AddonRepository(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        project = ForeignKeyField(Project, on_delete='CASCADE')
        url = CharField(max_length=2048)
        full_name = CharField(index=True)
        branch = CharField(default='main')
        auto_deploy = BooleanField(default=True)
        is_active = BooleanField(default=True)
        updated_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'addon_repository'
            indexes = ((('project', 'full_name'), True),)
    db.create_tables([AddonRepository])

    class GitWebhookSecret(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        project = ForeignKeyField(Project, unique=True, on_delete='CASCADE')
        secret_encrypted = TextField()
        rotated_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'git_webhook_secret'
    db.create_tables([GitWebhookSecret])

    class GitDelivery(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        project = ForeignKeyField(Project, on_delete='CASCADE')
        provider = CharField(max_length=16)
        delivery_id = CharField()
        event = CharField(max_length=64)
        result = TextField(null=True)
        class Meta:
            database = db
            table_name = 'git_delivery'
            indexes = ((('project', 'provider', 'delivery_id'), True),)
    db.create_tables([GitDelivery])


def down(migrator, db):
    migrator.migrate(migrator.drop_table('git_delivery'))
    migrator.migrate(migrator.drop_table('git_webhook_secret'))
    migrator.migrate(migrator.drop_table('addon_repository'))
