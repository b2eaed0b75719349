import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.org import User
from control_plane.models.project import Project
from control_plane.models.server import Server
from control_plane.vocabulary.states import CommandStatus, DeploymentStatus, EnvironmentStatus
from protocol.kinds import TaskKind


class Environment(BaseModel):
    project = peewee.ForeignKeyField(Project, backref="environments")
    server = peewee.ForeignKeyField(Server, null=True, backref="environments")
    name = peewee.CharField(max_length=255)
    environment_type = peewee.CharField(max_length=16, default="development")
    status = peewee.CharField(max_length=16, default=EnvironmentStatus.PENDING, index=True)
    branch = peewee.CharField(max_length=255, null=True)
    auto_deploy = peewee.BooleanField(default=False)
    cpu_cores = peewee.FloatField(null=True)
    ram_mb = peewee.IntegerField(null=True)
    disk_gb = peewee.IntegerField(null=True)
    custom_domain = peewee.CharField(max_length=255, null=True)
    custom_domain_verified = peewee.BooleanField(default=False)
    # Container references, cleared by destroy.
    erp_container = peewee.CharField(max_length=128, null=True)
    db_container = peewee.CharField(max_length=128, null=True)
    # Inactive environments are destroyed or deleted, or their project is; they are
    # never listed (states.is_active).
    is_active = peewee.BooleanField(default=True, index=True)
    # Since when a container of it has been restarting in a loop, as its server last
    # said (null: none is): `environment.crash_loop` goes out when this is set.
    crash_loop_since = DateTimeField(null=True)
    # Last measured disk usage (not live).
    disk_database_bytes = peewee.BigIntegerField(null=True)
    disk_filestore_bytes = peewee.BigIntegerField(null=True)
    disk_addons_bytes = peewee.BigIntegerField(null=True)
    disk_measured_at = DateTimeField(null=True)
    # What that size is made of, as the agent last said (services/servers/sizes.py),
    # and when its growth was last alerted (null: not since it last slowed down).
    disk_made_of = JSONField(null=True)
    growth_alerted_at = DateTimeField(null=True)
    updated_at = DateTimeField(null=True)
    # The backup policy (services/backups/policy.py): scheduled backups on or off
    # (None: on for `production` only), their time of day (UTC, HH:MM), the copies
    # kept, and the scheduled slot a scheduler last claimed.
    backup_enabled = peewee.BooleanField(null=True)
    backup_time = peewee.CharField(max_length=5, default="02:00")
    backup_keep_daily = peewee.IntegerField(default=7)
    backup_keep_weekly = peewee.IntegerField(default=4)
    backup_keep_monthly = peewee.IntegerField(default=3)
    backup_scheduled_for = DateTimeField(null=True)
    # Weekly restore drills (services/backups/drills.py): on or off (None: on for
    # production), and when the last scheduled one was started.
    drill_enabled = peewee.BooleanField(null=True)
    drill_scheduled_for = DateTimeField(null=True)
    # WAL archiving (services/backups/wal.py): the agent's last report, and since
    # when the archiving has been alerted as failing (None: it is not).
    wal_report = JSONField(null=True)
    wal_reported_at = DateTimeField(null=True)
    wal_alerted_at = DateTimeField(null=True)
    # The last gap found in its archived WAL (the files missing), and when.
    wal_gap = peewee.CharField(max_length=128, null=True)
    wal_gap_at = DateTimeField(null=True)
    # The configuration (services/environment_settings/configuration.py): variables by name
    # ({value, secret}; a secret's value sealed), ERP options and PostgreSQL
    # settings by key, from their allow-lists.
    variables = JSONField(null=True)
    erp_options = JSONField(null=True)
    postgres_settings = JSONField(null=True)
    config_updated_at = DateTimeField(null=True)
    # `database.is_neutralized` as the agent read it after the last restore
    # (services/backups/neutralize.py); None: not known.
    neutralized = peewee.BooleanField(null=True)
    # What a copy restored into this environment must be (services/backups/
    # neutralize.py): its profile (None: standard) and whether it is anonymised
    # (None: no); and whether the last restore anonymised it (None: not known).
    copy_profile = peewee.CharField(max_length=16, null=True)
    anonymize_copies = peewee.BooleanField(null=True)
    anonymized = peewee.BooleanField(null=True)
    # A deploy whose module update fails reverts to the previous code and the
    # pre-deploy backup (agent/deploy/updates.py), unless turned off (False; None: on).
    auto_revert = peewee.BooleanField(null=True)
    # A failing post-deploy check (agent/deploy/checks.py) fails the deploy and
    # reverts ("enforce", None) or is only logged ("warn").
    post_deploy_checks = peewee.CharField(max_length=8, null=True)
    # Module names each deploy installs (`-i`) when the database lacks them
    # (agent/deploy/updates.py); None: none.
    install_modules = JSONField(null=True)
    # A preview environment: the automation rule that made it for its branch, and
    # when that branch was last pushed (services/automation/previews.py).
    preview_rule = peewee.UUIDField(null=True, index=True)
    last_pushed_at = DateTimeField(null=True)


class Deployment(BaseModel):
    """A deployment record; the public API shows it as a "task"."""

    environment = peewee.ForeignKeyField(Environment, backref="deployments")
    project = peewee.ForeignKeyField(Project, backref="deployments")
    version = peewee.IntegerField(null=True)  # deployments only: 1, 2, 3… per environment
    kind = peewee.CharField(max_length=16, default=TaskKind.DEPLOY)
    trigger = peewee.CharField(max_length=16)
    status = peewee.CharField(max_length=16, default=DeploymentStatus.PENDING, index=True)
    git_branch = peewee.CharField(max_length=255, null=True)
    git_commit = peewee.CharField(max_length=64, null=True)
    image_tag = peewee.CharField(max_length=255, null=True)
    config = JSONField(null=True)  # resources, variables, add-ons, db settings
    rollback_from = peewee.ForeignKeyField("self", null=True, backref="rollbacks")
    extra_data = JSONField(default=dict)
    triggered_by = peewee.ForeignKeyField(User, null=True)
    error_message = peewee.TextField(null=True)
    can_rollback = peewee.BooleanField(default=True)
    # How long it may run before the reaper fails it, fixed by its kind when it
    # starts (services/tasks/kinds.py), counted from its last sign of progress.
    time_limit_minutes = peewee.IntegerField(default=30)
    # When that limit started counting, if not at `started_at`: a deploy's 30
    # minutes start when the agent reports its pre-deploy backup done.
    phase_started_at = DateTimeField(null=True)
    # The environment's status before the task moved it (control_plane/vocabulary/lifecycle.py):
    # where a cancel, or a failure that changed nothing, puts it back.
    environment_status_before = peewee.CharField(max_length=16, null=True)
    started_at = DateTimeField(null=True)
    completed_at = DateTimeField(null=True)
    updated_at = DateTimeField(null=True)

    class Meta:
        # An environment's tasks newest first; its newest of a kind (the overview).
        indexes = ((("environment", "version"), True), (("environment", "created_at"), False))


class TaskLogLine(BaseModel):
    deployment = peewee.ForeignKeyField(Deployment, backref="log_lines", on_delete="CASCADE")
    seq = peewee.IntegerField()
    level = peewee.CharField(max_length=8, default="info")
    message = peewee.TextField()

    class Meta:
        indexes = ((("deployment", "seq"), True),)


class AgentCommand(BaseModel):
    """A command for a server's agent that must not be lost: stored, delivered
    on (re)connect, acknowledged, executed at most once."""

    server = peewee.ForeignKeyField(Server, backref="commands")
    deployment = peewee.ForeignKeyField(Deployment, null=True, backref="commands")
    kind = peewee.CharField(max_length=32)
    payload = JSONField(default=dict)
    status = peewee.CharField(max_length=16, default=CommandStatus.QUEUED, index=True)
    attempts = peewee.IntegerField(default=0)
    delivered_at = DateTimeField(null=True)
    acked_at = DateTimeField(null=True)
    completed_at = DateTimeField(null=True)
    result = JSONField(null=True)
