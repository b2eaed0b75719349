"""Deployments: a record per attempt, a durable command to the server's agent,
and the statuses the agent's acknowledgement and result move it through."""

from limits import RateLimitItemPerMinute
from peewee import fn

from control_plane import clock, events, states
from control_plane.db import after_commit, database
from control_plane.models import Deployment, Environment, Project
from control_plane.services import addon_repositories, commands


def set_environment_status(env, target, org_id):
    """The environment's move, checked against its table, with its event."""
    if env.status == target:
        return
    states.check("environment", env.status, target)
    previous, env.status, env.updated_at = env.status, target, clock.now()
    Environment.update(status=target, updated_at=env.updated_at).where(
        Environment.id == env.id).execute()
    events.record_status_changed(env, org_id, previous, target)


# kind -> (agent command, environment status while it runs, status once it succeeded)
KINDS = {
    "deploy": ("deploy", "deploying", "running"),
    "redeploy": ("deploy", "deploying", "running"),
    "restart": ("restart", None, "running"),
    "start": ("start", None, "running"),
    "stop": ("stop", None, "stopped"),
    "delete": ("destroy", "destroying", "deleted"),
    # the operations surface's destroy: settled by services/destroy.py
    "destroy": ("destroy", "destroying", "pending"),
}


def failed_status(kind):
    """A failed deploy or deletion leaves the environment `failed`; a failed start,
    stop or restart is a runtime error on a deployed environment (`error`)."""
    return "failed" if KINDS[kind][1] else "error"


def wake(berth, server_id):
    """Tell the gateway a command is queued for the server, once it is committed."""
    if berth.gateway is not None and server_id is not None:
        gateway = berth.gateway
        after_commit(lambda: gateway.wake(server_id))


# Per organization (spec Limits), on every deployment a person asks for, on either
# surface; automatic ones (git push, a registration's auto_deploy) do not count.
DEPLOYMENTS_PER_MINUTE = RateLimitItemPerMinute(10)
RETRIES_PER_MINUTE = RateLimitItemPerMinute(10)


def count_requested(berth, org_id, *, retry=False):
    """A slot of each limit that applies, or of none (429 target_rate_limit)."""
    limits = [(RETRIES_PER_MINUTE, "retries", "manual retries")] if retry else []
    limits.append((DEPLOYMENTS_PER_MINUTE, "deployments", "deployments"))  # narrower first
    berth.limiter.hit_all(
        [(item, f"ops-{name}", (org_id.hex,),
          f"Too many {what} for this organization (at most {item.amount} a minute).")
         for item, name, what in limits], code="target_rate_limit")


def in_progress(env_id):
    return Deployment.select().where(Deployment.environment == env_id,
                                     Deployment.status.in_(("pending", "running"))).exists()


def start(env, project, settings, *, trigger, kind="deploy", triggered_by=None, commit=None,
          branch=None, image=None, config=None, rollback_from=None, extra_data=None,
          delete_data=False):
    """Inside the caller's transaction: the deployment record and its command.
    Branch, image and configuration default to the environment's current ones;
    a retry or a rollback passes those of the deployment it repeats."""
    version = (Deployment.select(fn.MAX(Deployment.version))
               .where(Deployment.environment == env.id).scalar() or 0) + 1
    image = image or settings["ERP_IMAGE"].format(erp_version=project.erp_version or "17.0")
    branch = branch or env.branch
    if config is None:
        config = {"cpu_cores": env.cpu_cores, "ram_mb": env.ram_mb,
                  "addon_repositories": addon_repositories.for_deploy(project.id)}
    deployment = Deployment.create(
        environment=env, project=project, version=version, kind=kind, trigger=trigger,
        status=states.check("deployment", None, "pending"), git_branch=branch,
        git_commit=commit, image_tag=image, triggered_by=triggered_by, config=config,
        rollback_from=rollback_from, extra_data=extra_data or {})
    commands.enqueue(env.server_id, KINDS[kind][0], {
        "environment_id": str(env.id), "deployment_id": str(deployment.id),
        "delete_data": kind == "delete" or bool(delete_data),
        "erp_image": image, "postgres_image": settings["POSTGRES_IMAGE"],
        "cpu_cores": config.get("cpu_cores"), "ram_mb": config.get("ram_mb"),
        "git": {"url": project.git_repo_url, "branch": branch, "commit": commit},
        "addon_repositories": config.get("addon_repositories") or [],
    }, deployment_id=deployment.id)
    return deployment


def on_ack(deployment_id):
    """The agent has the command: the task is running."""
    with database.atomic():
        d = Deployment.get_or_none(Deployment.id == deployment_id)
        if d is None or d.status != "pending":
            return
        now = clock.now()
        claimed = (Deployment.update(status=states.check("deployment", d.status, "running"),
                                     started_at=now, updated_at=now)
                   .where(Deployment.id == d.id, Deployment.status == d.status).execute())
        if not claimed:
            return  # cancelled meanwhile
        project = Project.get_by_id(d.project_id)
        events.record_started(d, project.organization_id)


def on_result(deployment_id, ok, result, error):
    """The agent finished: the deployment and its environment settle."""
    with database.atomic():
        d = Deployment.get_or_none(Deployment.id == deployment_id)
        if d is None or d.status in states.DEPLOYMENT_TERMINAL:
            return  # cancelled or reaped meanwhile: the late result changes nothing
        if d.kind == "destroy":
            from control_plane.services import destroy

            return destroy.settle(d, ok, result or {}, error)
        now = clock.now()
        target = "success" if ok else "failed"
        fields = {"status": states.check("deployment", d.status, target), "completed_at": now,
                  "updated_at": now, "started_at": d.started_at or now}
        result = result or {}
        if ok:
            fields["git_commit"] = result.get("git_commit") or d.git_commit
            fields["config"] = with_addon_commits(d.config, result.get("addon_commits"))
        else:
            fields["error_message"] = (error or "the deployment failed")[:2000]
        if not (Deployment.update(**fields)
                .where(Deployment.id == d.id, Deployment.status == d.status).execute()):
            return  # a cancel or the reaper settled it between our read and write
        env = Environment.get_by_id(d.environment_id)
        project = Project.get_by_id(d.project_id)
        done_status = KINDS[d.kind][2]
        if ok and d.kind in ("deploy", "redeploy"):
            Environment.update(erp_container=result.get("erp_container"),
                               db_container=result.get("db_container")).where(
                Environment.id == env.id).execute()
        if ok and done_status == "deleted":
            Environment.update(is_active=False, erp_container=None, db_container=None).where(
                Environment.id == env.id).execute()
            events.record_deleted(env.id, project.id, project.organization_id)
        set_environment_status(env, done_status if ok else failed_status(d.kind),
                               project.organization_id)
        events.record_finished(d, project.organization_id, ok, now)


def with_addon_commits(config, commits):
    """The deployment's add-on repositories pinned at the commits the agent
    deployed, so that a rollback to it checks out the same code."""
    repos = (config or {}).get("addon_repositories") or []
    if not commits or len(commits) != len(repos):
        return config
    return {**config, "addon_repositories": [{**repo, "commit": sha}
                                             for repo, sha in zip(repos, commits, strict=True)]}
