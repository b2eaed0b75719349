"""The deploy domain's task kinds, registered with their agent commands and hooks:
deploy and redeploy (code on the server), restart, start and stop, delete (the
public API's: the environment is gone for good) and destroy (/api/v1's: it may
be deployed again).

Every one of them carries the same command payload (`_payload`): the images,
resources, code, configuration and proxy routes of the environment. A deploy or
redeploy of an environment whose database has data takes a pre-deploy backup
first (`pre_backup`; its row settles with the deploy, services/backups/kinds.py)
and gets the longer time limit of the tasks that move whole databases."""

from control_plane import events
from control_plane.inputs.safe_input import storable
from control_plane.models import Environment
from control_plane.services.backups import kinds as backup_kinds
from control_plane.services.backups import wal
from control_plane.services.environment_settings import configuration, routes
from control_plane.services.projects import addon_repositories
from control_plane.services.tasks import kinds
from control_plane.vocabulary import lifecycle, states
from protocol.kinds import CommandKind, TaskKind

D = states.DeploymentStatus


# --- the task's row and its command -------------------------------------------------

def _defaults(env, settings, given):
    """A new deployment runs the project's image and the environment's current
    configuration; a retry or rollback gives those it repeats."""
    out = {}
    if not given.get("image_tag"):
        out["image_tag"] = settings["ERP_IMAGE"].format(
            erp_version=env.project.effective_erp_version)
    if given.get("config") is None:
        out["config"] = {"cpu_cores": env.cpu_cores, "ram_mb": env.ram_mb,
                         "addon_repositories": addon_repositories.for_deploy(env.project_id),
                         **configuration.snapshot(env)}
    return out


def _payload(task, env, settings, *, delete_data=False):
    config = task.config or {}
    return {
        "environment_id": str(env.id), "deployment_id": str(task.id),
        "delete_data": task.kind == TaskKind.DELETE or bool(delete_data),
        "erp_image": task.image_tag, "postgres_image": settings["POSTGRES_IMAGE"],
        "cpu_cores": config.get("cpu_cores"), "ram_mb": config.get("ram_mb"),
        "git": {"url": env.project.git_repo_url, "branch": task.git_branch,
                "commit": task.git_commit},
        "addon_repositories": config.get("addon_repositories") or [],
        "auto_revert": env.auto_revert is not False,
        "post_deploy_checks": env.post_deploy_checks or "enforce",
        "install_modules": env.install_modules or [],
        # Not production: the ERP's mail goes to the server's catcher (agent/mail/).
        "mail_catcher": env.environment_type != "production",
        **configuration.agent_fields(config),  # secret values sealed until delivery
        **routes.fields(env, settings),  # the proxy and the host names it routes here
        **wal.agent_fields(env, settings),  # where its database archives its WAL
    }


def _code_payload(task, env, settings):
    payload = _payload(task, env, settings)
    if pre_backup := backup_kinds.pre_deploy(env, task, settings):
        payload["pre_backup"] = pre_backup  # the agent takes it first, or fails the deploy
    return payload


def _code_time_limit(payload):
    return backup_kinds.TIME_LIMIT if payload.get("pre_backup") else kinds.TIME_LIMIT


# --- what success keeps -----------------------------------------------------------

def with_addon_commits(config, commits):
    """The deployment's add-on repositories pinned at the commits the agent
    deployed, so that a rollback to it checks out the same code."""
    repos = (config or {}).get("addon_repositories") or []
    if not commits or len(commits) != len(repos):
        return config
    return {**config, "addon_repositories": [{**repo, "commit": sha}
                                             for repo, sha in zip(repos, commits, strict=True)]}


def _code_fields(d, result):
    """What a successful task keeps of the agent's result: the commits it ran, and
    the project's commit's subject and author (an agent of 0.2.0 or before sends
    neither: its deployments show the commit alone)."""
    fields = {"git_commit": result.get("git_commit") or d.git_commit,
              "config": with_addon_commits(d.config, result.get("addon_commits")),
              **_checks_fields(d, result)}
    said = {k: storable(str(result[f"git_{k}"]))[:200] for k in ("message", "author")
            if result.get(f"git_{k}")}
    if said:
        fields["extra_data"] = {**fields.get("extra_data", d.extra_data or {}), "commit": said}
    return fields


def _checks_fields(d, result):
    """The post-deploy checks' report (agent/deploy/checks.py), kept whether the
    deploy stood or failed; an earlier agent sends none."""
    report = result.get("checks")
    if not isinstance(report, list):
        return {}
    kept = [{k: storable(str(c.get(k) or ""))[:500] for k in ("name", "status", "detail")}
            for c in report[:10] if isinstance(c, dict)]
    return {"extra_data": {**(d.extra_data or {}), "checks": kept}}


def _destroy_fields(d, result):
    return {"extra_data": {**(d.extra_data or {}),
                           "deleted_containers": int(result.get("deleted_containers") or 0),
                           "deleted_database": bool(result.get("deleted_database")),
                           "deleted_data": bool(result.get("deleted_data"))}}


def _containers(env, result, org_id, now):
    Environment.update(erp_container=result.get("erp_container"),
                       db_container=result.get("db_container")).where(
        Environment.id == env.id).execute()


def _removed(env, result, org_id, now):
    """Deleted (public API) or destroyed (/api/v1): gone from the API, no containers."""
    env.is_active = False
    Environment.update(is_active=False, erp_container=None, db_container=None,
                       updated_at=now).where(Environment.id == env.id).execute()
    events.record_deleted(env.id, env.project_id, org_id)


# --- events -------------------------------------------------------------------------

def _started(d, org_id, now):
    if lifecycle.rule(d.kind).deploy_events:
        events.record_started(d, org_id)


def _settled(d, outcome, org_id, now, env_status):
    """`deploy.*` for a deploy or redeploy only (lifecycle): a stop, start,
    restart or removal is told by its `environment.*` events."""
    if not lifecycle.rule(d.kind).deploy_events:
        return
    if outcome.status == D.CANCELLED:
        events.record_cancelled(d, org_id, outcome.cancelled_by, env_status)
    else:
        events.record_finished(d, org_id, outcome.ok, now,
                               (outcome.error or "the deployment failed")[:2000])


def _code_started(d, org_id, now):
    backup_kinds.pre_deploy_started(d, now)
    _started(d, org_id, now)


def _code_settled(d, outcome, org_id, now, env_status):
    backup_kinds.pre_deploy_settled(d, outcome, now)
    _settled(d, outcome, org_id, now, env_status)


def _kind(name, command, **hooks):
    hooks = {"payload": _payload, "defaults": _defaults, "task_fields": _code_fields,
             "result_fields": _checks_fields,
             "failure": "the deployment failed", "started": _started, "settled": _settled,
             **hooks}
    return kinds.register(kinds.Kind(name, command, **hooks))


for _name in (TaskKind.DEPLOY, TaskKind.REDEPLOY):
    _kind(_name, CommandKind.DEPLOY, payload=_code_payload, deploys_code=True,
          time_limit=_code_time_limit, on_success=_containers, started=_code_started,
          settled=_code_settled)
_kind(TaskKind.RESTART, CommandKind.RESTART)
_kind(TaskKind.START, CommandKind.START)
_kind(TaskKind.STOP, CommandKind.STOP)
_kind(TaskKind.DELETE, CommandKind.DESTROY, on_success=_removed)
_kind(TaskKind.DESTROY, CommandKind.DESTROY, succeeded=D.DESTROYED, task_fields=_destroy_fields,
      on_success=_removed, failure="the destroy failed")
