import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.org import Organization
from control_plane.models.project import Project


class Build(BaseModel):
    """A push's build (services/automation/builds.py): a throwaway environment at the
    pushed commit, filled empty or from a neutralised copy, whose changed modules'
    tests ran. `status`: queued, running, passed, failed (a test failed), error (the
    tests could not run) or cancelled (a newer push of the branch). `tests`: each
    test's outcome as the ERP's log told it; `log`: that log."""

    organization = peewee.ForeignKeyField(Organization, on_delete="CASCADE", index=False)
    project = peewee.ForeignKeyField(Project, on_delete="CASCADE", index=False)
    rule_id = peewee.UUIDField(null=True)
    run_id = peewee.UUIDField(null=True, index=True)
    branch = peewee.CharField(max_length=255)
    commit = peewee.CharField(max_length=64, null=True)
    base_commit = peewee.CharField(max_length=64, null=True)
    status = peewee.CharField(max_length=16)
    stage = peewee.CharField(max_length=16, null=True)  # create, copy, test
    environment_id = peewee.UUIDField(null=True)
    server_id = peewee.UUIDField(null=True)
    modules = JSONField(null=True)
    tests = JSONField(null=True)
    counts = JSONField(null=True)  # tests, passed, failures, errors, skipped
    log = peewee.TextField(null=True)
    reason = peewee.TextField(null=True)
    started_at = DateTimeField(null=True)
    finished_at = DateTimeField(null=True)
    # The commit status last reported to the project's forge (its `status`), and the
    # next try when reporting failed (services/webhooks/commit_statuses.py).
    status_reported = peewee.CharField(max_length=16, null=True)
    status_attempts = peewee.IntegerField(default=0)
    status_next_at = DateTimeField(null=True)
    status_error = peewee.TextField(null=True)

    class Meta:
        table_name = "build"
        indexes = ((("project", "created_at", "id"), False),
                   (("server_id", "status"), False))
