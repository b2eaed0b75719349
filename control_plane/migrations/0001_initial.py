"""Initial schema: the whole domain (frozen copy; later changes are new migrations)."""
from peewee import *
import uuid


def up(migrator, db):
    class Organization(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        name = CharField()
        server_quota = IntegerField(default=10)
        ticket_seq = IntegerField(default=0)
        class Meta:
            database = db
            table_name = 'organization'
    db.create_tables([Organization])

    class Server(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization, null=True)
        name = CharField()
        provider = CharField(max_length=64)
        region = CharField(null=True, max_length=64)
        cpu_cores = IntegerField()
        ram_mb = IntegerField()
        disk_gb = IntegerField()
        hostname = CharField(null=True)
        agent_credential_hash = CharField(unique=True, null=True, max_length=64)
        agent_version = CharField(null=True, max_length=32)
        connected_since = DateTimeField(null=True)
        last_seen_at = DateTimeField(null=True)
        deleted_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'server'
    db.create_tables([Server])

    class Project(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization)
        name = CharField()
        erp_version = CharField(null=True, max_length=32)
        git_repo_url = CharField(null=True, max_length=2048)
        default_branch = CharField(null=True)
        server = ForeignKeyField(Server, null=True)
        updated_at = DateTimeField(null=True)
        deleted_at = DateTimeField(index=True, null=True)
        class Meta:
            database = db
            table_name = 'project'
    db.create_tables([Project])

    class Environment(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        project = ForeignKeyField(Project)
        server = ForeignKeyField(Server, null=True)
        name = CharField()
        environment_type = CharField(max_length=16, default='development')
        status = CharField(index=True, max_length=16, default='pending')
        branch = CharField(null=True)
        auto_deploy = BooleanField(default=False)
        cpu_cores = FloatField(null=True)
        ram_mb = IntegerField(null=True)
        disk_gb = IntegerField(null=True)
        custom_domain = CharField(null=True)
        custom_domain_verified = BooleanField(default=False)
        erp_container = CharField(null=True, max_length=128)
        db_container = CharField(null=True, max_length=128)
        is_active = BooleanField(index=True, default=True)
        disk_database_bytes = BigIntegerField(null=True)
        disk_filestore_bytes = BigIntegerField(null=True)
        disk_addons_bytes = BigIntegerField(null=True)
        disk_measured_at = DateTimeField(null=True)
        updated_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'environment'
    db.create_tables([Environment])

    class User(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization)
        name = CharField()
        email = CharField(max_length=320)
        permissions = TextField(default=list)
        deleted_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'user'
    db.create_tables([User])

    class Deployment(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        environment = ForeignKeyField(Environment)
        project = ForeignKeyField(Project)
        version = IntegerField()
        kind = CharField(max_length=16, default='deploy')
        trigger = CharField(max_length=16)
        status = CharField(index=True, max_length=16, default='pending')
        git_branch = CharField(null=True)
        git_commit = CharField(null=True, max_length=64)
        image_tag = CharField(null=True)
        config = TextField(null=True)
        rollback_from = ForeignKeyField('self', null=True)
        extra_data = TextField(default=dict)
        triggered_by = ForeignKeyField(User, null=True)
        error_message = TextField(null=True)
        can_rollback = BooleanField(default=True)
        started_at = DateTimeField(null=True)
        completed_at = DateTimeField(null=True)
        updated_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'deployment'
            indexes = ((('environment', 'version'), True),)
    db.create_tables([Deployment])

    class AgentCommand(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        server = ForeignKeyField(Server)
        deployment = ForeignKeyField(Deployment, null=True)
        kind = CharField(max_length=32)
        payload = TextField(default=dict)
        status = CharField(index=True, max_length=16, default='queued')
        attempts = IntegerField(default=0)
        delivered_at = DateTimeField(null=True)
        acked_at = DateTimeField(null=True)
        completed_at = DateTimeField(null=True)
        result = TextField(null=True)
        class Meta:
            database = db
            table_name = 'agent_command'
    db.create_tables([AgentCommand])

    class ApiKey(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        public_id = CharField(unique=True, max_length=32)
        organization = ForeignKeyField(Organization)
        name = CharField()
        key_type = CharField(max_length=16)
        scope = CharField(max_length=16)
        project = ForeignKeyField(Project, null=True)
        prefix = CharField(max_length=32)
        key_hash = CharField(unique=True, max_length=64)
        server_registration = BooleanField(default=False)
        support_tickets = BooleanField(default=False)
        owner = ForeignKeyField(User, null=True)
        expires_at = DateTimeField(null=True)
        revoked_at = DateTimeField(null=True)
        deleted_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'api_key'
    db.create_tables([ApiKey])

    class Backup(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        environment = ForeignKeyField(Environment)
        status = CharField(index=True, max_length=16, default='pending')
        backup_type = CharField(max_length=16, default='manual')
        database_size = BigIntegerField(default=0)
        filestore_size = BigIntegerField(default=0)
        total_size = BigIntegerField(default=0)
        compressed_size = BigIntegerField(default=0)
        started_at = DateTimeField(null=True)
        completed_at = DateTimeField(null=True)
        duration_seconds = IntegerField(null=True)
        expires_at = DateTimeField(null=True)
        is_verified = BooleanField(default=False)
        verified_at = DateTimeField(null=True)
        notes = TextField(null=True)
        error_message = TextField(null=True)
        storage_key = CharField(null=True, max_length=512)
        class Meta:
            database = db
            table_name = 'backup'
    db.create_tables([Backup])

    class Event(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        event_id = UUIDField(unique=True, default=uuid.uuid4)
        organization = ForeignKeyField(Organization)
        project = ForeignKeyField(Project, null=True)
        name = CharField(max_length=64)
        data = TextField(default=dict)
        fanned_out = BooleanField(index=True, default=False)
        class Meta:
            database = db
            table_name = 'event'
    db.create_tables([Event])

    class IdempotencyRecord(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        api_key = ForeignKeyField(ApiKey, on_delete='CASCADE')
        key = CharField()
        method = CharField(max_length=8)
        path = CharField(max_length=2048)
        state = CharField(max_length=16, default='in_flight')
        locked_until = DateTimeField(null=True)
        expires_at = DateTimeField(index=True)
        response_status = IntegerField(null=True)
        response_body = TextField(null=True)
        response_headers = TextField(null=True)
        class Meta:
            database = db
            table_name = 'idempotency_record'
            indexes = ((('api_key', 'key'), True),)
    db.create_tables([IdempotencyRecord])

    class RegistrationToken(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization)
        token_hash = CharField(unique=True, max_length=64)
        token_prefix = CharField(max_length=24)
        server_name = CharField(null=True)
        ssh_username = CharField(max_length=64, default='root')
        auto_deploy = TextField(null=True)
        status = CharField(max_length=16, default='pending')
        expires_at = DateTimeField()
        created_by = ForeignKeyField(User, null=True)
        created_by_name = CharField()
        server = ForeignKeyField(Server, null=True)
        consumed_at = DateTimeField(null=True)
        revoked_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'registration_token'
    db.create_tables([RegistrationToken])

    class Release(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        version = CharField(unique=True, max_length=32)
        major = IntegerField()
        minor = IntegerField()
        patch = IntegerField()
        date = DateField(index=True)
        title = CharField()
        highlights = TextField(default=list)
        categories = TextField(default=dict)
        class Meta:
            database = db
            table_name = 'release'
            indexes = ((('major', 'minor', 'patch'), False),)
    db.create_tables([Release])

    class TaskLogLine(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        deployment = ForeignKeyField(Deployment, on_delete='CASCADE')
        seq = IntegerField()
        level = CharField(max_length=8, default='info')
        message = TextField()
        class Meta:
            database = db
            table_name = 'task_log_line'
            indexes = ((('deployment', 'seq'), True),)
    db.create_tables([TaskLogLine])

    class Ticket(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization)
        ticket_number = CharField(unique=True, max_length=32)
        subject = CharField()
        description = TextField()
        status = CharField(index=True, max_length=32, default='open')
        priority = CharField(max_length=16, default='normal')
        category = CharField(max_length=32, default='general')
        source = CharField(max_length=16, default='api')
        project = ForeignKeyField(Project, null=True)
        environment = ForeignKeyField(Environment, null=True)
        server = ForeignKeyField(Server, null=True)
        requester_email = CharField(null=True, max_length=320)
        assignee = CharField(null=True)
        internal_tags = TextField(default=list)
        sla_due_at = DateTimeField(null=True)
        satisfaction_rating = IntegerField(null=True)
        updated_at = DateTimeField(null=True)
        resolved_at = DateTimeField(null=True)
        closed_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'ticket'
    db.create_tables([Ticket])

    class TicketComment(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        ticket = ForeignKeyField(Ticket)
        author_name = CharField()
        from_support = BooleanField(default=False)
        is_internal = BooleanField(default=False)
        content = TextField()
        class Meta:
            database = db
            table_name = 'ticket_comment'
    db.create_tables([TicketComment])

    class UserToken(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        user = ForeignKeyField(User)
        token_hash = CharField(unique=True, max_length=64)
        prefix = CharField(max_length=24)
        expires_at = DateTimeField(null=True)
        revoked_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'user_token'
    db.create_tables([UserToken])

    class Webhook(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        organization = ForeignKeyField(Organization)
        project = ForeignKeyField(Project, null=True)
        url = CharField(max_length=2048)
        events = TextField(default=list)
        description = CharField(max_length=500, default='')
        format = CharField(max_length=8, default='raw')
        is_active = BooleanField(default=True)
        secret_encrypted = TextField()
        last_triggered_at = DateTimeField(null=True)
        failure_count = IntegerField(default=0)
        updated_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'webhook'
    db.create_tables([Webhook])

    class WebhookDelivery(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        webhook = ForeignKeyField(Webhook, on_delete='CASCADE')
        event = ForeignKeyField(Event)
        status = CharField(index=True, max_length=16, default='retrying')
        attempt_count = IntegerField(default=0)
        next_attempt_at = DateTimeField(index=True, null=True)
        claimed_until = DateTimeField(null=True)
        response_status = IntegerField(null=True)
        response_body = TextField(null=True)
        error_reason = TextField(null=True)
        duration_ms = IntegerField(null=True)
        delivered_at = DateTimeField(null=True)
        class Meta:
            database = db
            table_name = 'webhook_delivery'
    db.create_tables([WebhookDelivery])


def down(migrator, db):
    migrator.migrate(migrator.drop_table('webhook_delivery'))
    migrator.migrate(migrator.drop_table('webhook'))
    migrator.migrate(migrator.drop_table('user_token'))
    migrator.migrate(migrator.drop_table('ticket_comment'))
    migrator.migrate(migrator.drop_table('ticket'))
    migrator.migrate(migrator.drop_table('task_log_line'))
    migrator.migrate(migrator.drop_table('release'))
    migrator.migrate(migrator.drop_table('registration_token'))
    migrator.migrate(migrator.drop_table('idempotency_record'))
    migrator.migrate(migrator.drop_table('event'))
    migrator.migrate(migrator.drop_table('backup'))
    migrator.migrate(migrator.drop_table('api_key'))
    migrator.migrate(migrator.drop_table('agent_command'))
    migrator.migrate(migrator.drop_table('deployment'))
    migrator.migrate(migrator.drop_table('user'))
    migrator.migrate(migrator.drop_table('environment'))
    migrator.migrate(migrator.drop_table('project'))
    migrator.migrate(migrator.drop_table('server'))
    migrator.migrate(migrator.drop_table('organization'))

