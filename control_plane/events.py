"""The event outbox: what happened, written as an `Event` row in the transaction of
the change that caused it (so an event exists exactly when its change committed);
the webhook delivery job (services/webhooks/delivery.py) fans it out later.

Every event name is defined here once (`Name`, with the title chat messages show),
and each event's payload is built here once (`record_*`; docs/webhooks.md lists
them for receivers). Below the services: it imports models and states only."""

from enum import StrEnum

from control_plane.models import Event
from control_plane.vocabulary.states import TaskStatus, public_environment_status


class Name(StrEnum):
    """An event's name as receivers see it, and its title."""

    def __new__(cls, value, title):
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = title
        return member

    DEPLOY_STARTED = "deploy.started", "Deployment started"
    DEPLOY_COMPLETED = "deploy.completed", "Deployment completed"
    DEPLOY_FAILED = "deploy.failed", "Deployment failed"
    DEPLOY_CANCELLED = "deploy.cancelled", "Deployment cancelled"
    ENVIRONMENT_CREATED = "environment.created", "Environment created"
    ENVIRONMENT_DELETED = "environment.deleted", "Environment deleted"
    ENVIRONMENT_STATUS_CHANGED = "environment.status_changed", "Environment status changed"
    BACKUP_STARTED = "backup.started", "Backup started"
    BACKUP_COMPLETED = "backup.completed", "Backup completed"
    BACKUP_FAILED = "backup.failed", "Backup failed"
    RESTORE_STARTED = "restore.started", "Restore started"
    RESTORE_COMPLETED = "restore.completed", "Restore completed"
    RESTORE_FAILED = "restore.failed", "Restore failed"
    BACKUP_DRILL_COMPLETED = "backup.drill_completed", "Restore drill passed"
    BACKUP_DRILL_FAILED = "backup.drill_failed", "Restore drill failed"
    BACKUP_ARCHIVING_FAILED = "backup.archiving_failed", "WAL archiving failing"
    BACKUP_ARCHIVING_RECOVERED = "backup.archiving_recovered", "WAL archiving working again"
    AUTOMATION_RULE_TRIGGERED = "automation_rule.triggered", "Automation rule triggered"
    AUTOMATION_RULE_COMPLETED = "automation_rule.completed", "Automation rule completed"
    AUTOMATION_RULE_FAILED = "automation_rule.failed", "Automation rule failed"
    SERVER_UNREACHABLE = "server.unreachable", "Server unreachable"
    SERVER_RECOVERED = "server.recovered", "Server reachable again"
    SERVER_DISK_CRITICAL = "server.disk_critical", "Server disk almost full"
    SERVER_MEMORY_CRITICAL = "server.memory_critical", "Server memory almost used up"
    ENVIRONMENT_CRASH_LOOP = "environment.crash_loop", "Environment container restarting in a loop"
    ENVIRONMENT_DISK_GROWTH = "environment.disk_growth", "Environment growing fast"
    CERTIFICATE_FAILING = "certificate.failing", "Certificate failing"
    BUILD_STARTED = "build.started", "Build started"
    BUILD_COMPLETED = "build.completed", "Build passed"
    BUILD_FAILED = "build.failed", "Build failed"
    # Sent by a webhook's test endpoint only: never stored, not subscribable.
    PING = "ping", "Test ping"


# What a webhook may subscribe to, in the order the API documents them.
SUBSCRIBABLE = tuple(n.value for n in Name if n is not Name.PING)
# The spec's `deployment.*` spellings, accepted on input and stored as `deploy.*`.
ALIASES = {"deployment." + n.value.removeprefix("deploy."): n.value
           for n in Name if n.value.startswith("deploy.")}


def canonical(name):
    """The stored spelling of a subscribable name or of its alias."""
    return ALIASES.get(name, name)


def title(name):
    """The title of a known event; an unknown name stands for itself."""
    try:
        return Name(name).label
    except ValueError:
        return name


def record_event(org_id, project_id, name, data):
    """One outbox row, in the caller's transaction; `name` must be a `Name`."""
    return Event.add(organization=org_id, project=project_id, name=Name(name).value, data=data)


def record_created(env, org_id):
    """`environment.created`: a new environment, or a destroyed one deployed again."""
    return record_event(org_id, env.project_id, Name.ENVIRONMENT_CREATED,
                        {"environment_id": str(env.id), "project_id": str(env.project_id),
                         "name": env.name})


def record_status_changed(env, org_id, previous, target):
    return record_event(org_id, env.project_id, Name.ENVIRONMENT_STATUS_CHANGED,
                        {"environment_id": str(env.id), "project_id": str(env.project_id),
                         "from": previous and public_environment_status(previous),
                         "to": public_environment_status(target)})


def record_deleted(env_id, project_id, org_id):
    """The environment left the API (deleted, destroyed, or its project deleted)."""
    return record_event(org_id, project_id, Name.ENVIRONMENT_DELETED,
                        {"environment_id": str(env_id), "project_id": str(project_id)})


def _deploy_data(d):
    """A deployment's event data: `kind` (`deploy` or `redeploy`) and `trigger`
    (`rollback` for a rollback) say what it was."""
    return {"environment_id": str(d.environment_id), "project_id": str(d.project_id),
            "task_id": str(d.id), "kind": d.kind, "trigger": d.trigger}


def record_started(d, org_id):
    """`deploy.started`: the agent has the deployment's command."""
    return record_event(org_id, d.project_id, Name.DEPLOY_STARTED, _deploy_data(d))


def record_finished(d, org_id, ok, now, error=None):
    """`deploy.completed` or `deploy.failed` (with the reason) for a deployment
    that ended."""
    data = {**_deploy_data(d), "status": TaskStatus.COMPLETED if ok else TaskStatus.FAILED,
            "duration_seconds": int((now - (d.started_at or d.created_at)).total_seconds())}
    if not ok:
        data["error_message"] = error
    return record_event(org_id, d.project_id,
                        Name.DEPLOY_COMPLETED if ok else Name.DEPLOY_FAILED, data)


def record_cancelled(d, org_id, cancelled_by, environment_status):
    """`deploy.cancelled`: `cancelled_by` is the user's id; the environment's
    status is the one the cancel left it in."""
    return record_event(org_id, d.project_id, Name.DEPLOY_CANCELLED,
                        {**_deploy_data(d),
                         "status": TaskStatus.CANCELLED, "cancelled_by": str(cancelled_by),
                         "environment_status": public_environment_status(environment_status)})


def _backup_data(backup, project_id):
    return {"environment_id": str(backup.environment_id), "project_id": str(project_id),
            "backup_id": str(backup.id), "backup_type": backup.backup_type,
            "task_id": backup.task_id and str(backup.task_id)}


def record_backup_started(backup, project_id, org_id):
    """`backup.started`: the agent has the backup's task."""
    return record_event(org_id, project_id, Name.BACKUP_STARTED, _backup_data(backup, project_id))


def record_backup_finished(backup, project_id, org_id, ok):
    """`backup.completed` (with sizes) or `backup.failed` (with the reason)."""
    data = _backup_data(backup, project_id)
    if ok:
        data.update(status=backup.status, total_size=backup.total_size,
                    compressed_size=backup.compressed_size,
                    duration_seconds=backup.duration_seconds, is_verified=backup.is_verified)
        return record_event(org_id, project_id, Name.BACKUP_COMPLETED, data)
    return record_event(org_id, project_id, Name.BACKUP_FAILED,
                        {**data, "status": backup.status, "error_message": backup.error_message})


def _restore_data(d):
    extra = d.extra_data or {}
    return {"environment_id": str(d.environment_id), "project_id": str(d.project_id),
            "task_id": str(d.id), "backup_id": extra.get("backup_id"),
            "safety_backup_id": extra.get("safety_backup_id")}


def record_restore_started(d, org_id):
    """`restore.started`: the agent has the restore's task."""
    return record_event(org_id, d.project_id, Name.RESTORE_STARTED, _restore_data(d))


def record_restore_finished(d, org_id, ok, error=None, copy=None):
    """`restore.completed` (with whether the restored database is neutralised and
    anonymised, true, false or null when unknown, and the neutralisation profile
    checked) or `restore.failed` (with the reason)."""
    if ok:
        copy = copy or {}
        return record_event(org_id, d.project_id, Name.RESTORE_COMPLETED,
                            {**_restore_data(d), "status": TaskStatus.COMPLETED,
                             "neutralized": copy.get("neutralized"),
                             "anonymized": copy.get("anonymized"),
                             "neutralize_profile": copy.get("profile")})
    return record_event(org_id, d.project_id, Name.RESTORE_FAILED,
                        {**_restore_data(d), "status": TaskStatus.FAILED, "error_message": error})


def record_drill_finished(d, org_id, ok, error=None):
    """`backup.drill_completed` (what the drill proved, its time to restore) or
    `backup.drill_failed` (with the reason and what it measured before)."""
    extra = d.extra_data or {}
    data = {"environment_id": str(d.environment_id), "project_id": str(d.project_id),
            "task_id": str(d.id), "backup_id": extra.get("backup_id"),
            "trigger": d.trigger, **{k: extra.get(k) for k in (
                "restore_seconds", "tables", "rows", "attachments")}}
    if ok:
        return record_event(org_id, d.project_id, Name.BACKUP_DRILL_COMPLETED,
                            {**data, "status": TaskStatus.COMPLETED})
    return record_event(org_id, d.project_id, Name.BACKUP_DRILL_FAILED,
                        {**data, "status": TaskStatus.FAILED, "error_message": error})


def record_archiving(env, org_id, reason):
    """`backup.archiving_failed` (with the reason) as an environment's WAL archiving
    starts failing; `backup.archiving_recovered` (reason None) as it works again."""
    data = {"environment_id": str(env.id), "project_id": str(env.project_id)}
    if reason:
        return record_event(org_id, env.project_id, Name.BACKUP_ARCHIVING_FAILED,
                            {**data, "error_message": reason})
    return record_event(org_id, env.project_id, Name.BACKUP_ARCHIVING_RECOVERED, data)


def record_automation(rule, run, name, reason=None):
    """`automation_rule.triggered` as a run starts; `.completed` or `.failed` (with
    the reason, and `status` `skipped` when its action could not start) as it ends."""
    data = {"rule_id": str(rule.id), "rule_name": rule.name, "run_id": str(run.id),
            "project_id": str(rule.project_id), "action_type": rule.action["type"],
            "trigger_type": run.trigger_type, "branch": run.branch, "actor": run.actor,
            "environment_id": run.environment_id and str(run.environment_id),
            "task_id": run.task and str(run.task)}
    if name != Name.AUTOMATION_RULE_TRIGGERED:
        data.update(status=run.status, reason=reason)
    return record_event(rule.organization_id, rule.project_id, name, data)


def _server_data(server):
    return {"server_id": str(server.id), "server_name": server.name,
            "connection": server.connection}


def record_server(server, name, **data):
    """`server.unreachable`, `server.recovered`, `server.disk_critical`,
    `server.memory_critical` (organization-wide: no project)."""
    return record_event(server.organization_id, None, name, {**_server_data(server), **data})


def record_crash_loop(env, server, org_id, loop):
    """`environment.crash_loop`: one of its containers keeps being restarted."""
    return record_event(org_id, env.project_id, Name.ENVIRONMENT_CRASH_LOOP, {
        "environment_id": str(env.id), "project_id": str(env.project_id),
        **_server_data(server), "role": loop["role"], "restart_count": loop["restart_count"],
        "container_state": loop["state"]})


def record_disk_growth(env, figure, rates, limit):
    """`environment.disk_growth`: its database or filestore grew more than the limit
    over the last day (services/servers/sizes.py); `env` joined to its project."""
    return record_event(env.project.organization_id, env.project_id,
                        Name.ENVIRONMENT_DISK_GROWTH, {
                            "environment_id": str(env.id), "project_id": str(env.project_id),
                            "figure": figure, "limit_bytes_per_day": limit,
                            "database_bytes": env.disk_database_bytes,
                            "filestore_bytes": env.disk_filestore_bytes,
                            "database_bytes_per_day": rates["database_bytes_per_day"],
                            "filestore_bytes_per_day": rates["filestore_bytes_per_day"]})


def record_build(build, name):
    """`build.started`, `build.completed` (its tests passed) or `build.failed` (a test
    failed, the tests could not run, or a newer push cancelled it: `status` says)."""
    return record_event(build.organization_id, build.project_id, name, {
        "build_id": str(build.id), "project_id": str(build.project_id),
        "rule_id": str(build.rule_id) if build.rule_id else None, "branch": build.branch,
        "commit": build.commit, "status": build.status,
        "environment_id": str(build.environment_id) if build.environment_id else None,
        "counts": build.counts, "reason": build.reason})


def record_certificate_failing(server, env, hostname, reason):
    """`certificate.failing`: the proxy could not get (or renew) a name's certificate."""
    return record_event(server.organization_id, env.project_id if env else None,
                        Name.CERTIFICATE_FAILING, {
                            **_server_data(server), "hostname": hostname, "reason": reason,
                            "environment_id": str(env.id) if env else None,
                            "project_id": str(env.project_id) if env else None})
