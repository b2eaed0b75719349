import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.org import Organization
from control_plane.models.project import Project


class AutomationRule(BaseModel):
    """What a project does without a person (services/automation): on a push, on a
    schedule or after an event, an action. `trigger` and `action` are the shapes
    the API shows; the columns after them are what the triggers look rules up by."""

    organization = peewee.ForeignKeyField(Organization)
    project = peewee.ForeignKeyField(Project, backref="automation_rules")
    name = peewee.CharField(max_length=100)
    enabled = peewee.BooleanField(default=True)
    trigger = JSONField()
    action = JSONField()
    trigger_type = peewee.CharField(max_length=16)
    watched_environment = peewee.UUIDField(null=True, index=True)  # an event rule's
    next_run_at = DateTimeField(null=True, index=True)  # a schedule's next occurrence, UTC
    created_by = peewee.CharField(max_length=255, null=True)  # the key's public id
    updated_at = DateTimeField(null=True)
    deleted_at = DateTimeField(null=True)  # its runs stay readable for 90 days

    class Meta:
        indexes = ((("project", "trigger_type"), False),)


class AutomationRun(BaseModel):
    """One firing of a rule: `running` until its action's task ends (`completed`,
    `failed`), or `skipped` when the action could not start (the reason says why).
    `task` is the action's current task; `action_started` false: the scheduler's
    job starts it (a run an event made inside a task's settling)."""

    rule = peewee.ForeignKeyField(AutomationRule, backref="runs", on_delete="CASCADE")
    trigger_type = peewee.CharField(max_length=16)
    branch = peewee.CharField(max_length=255, null=True)
    actor = peewee.CharField(max_length=255)
    status = peewee.CharField(max_length=16)
    reason = peewee.TextField(null=True)
    started_at = DateTimeField()
    finished_at = DateTimeField(null=True)
    environment_id = peewee.UUIDField(null=True)
    task = peewee.UUIDField(null=True, index=True)
    action_started = peewee.BooleanField(default=False)
    stage = peewee.CharField(max_length=16, null=True)  # copy_database: backup, restore
    backup_id = peewee.UUIDField(null=True)  # copy_database: the backup it restores
    depth = peewee.IntegerField(default=0)  # rules an event chain passed through

    class Meta:
        indexes = ((("rule", "created_at", "id"), False), (("status", "action_started"), False))
