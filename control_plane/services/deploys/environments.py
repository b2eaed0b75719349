"""Environments: one ERP instance of a project, with its own database,
containers and URL, on the project's server."""

from control_plane import events
from control_plane.agent_link import Plain
from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import Deployment, Environment, Project, Server, TaskLogLine
from control_plane.services import agents, audit
from control_plane.services.accounts.scope import projects_for
from control_plane.services.deploys import actions
from control_plane.services.environment_settings import access, routes
from control_plane.services.tasks import engine, kinds
from control_plane.vocabulary import lifecycle, states
from control_plane.vocabulary.errors import (
    ConfirmRequired,
    ExceedsServerCapacity,
    NoServer,
    NotFound,
)
from protocol.kinds import TaskKind
from protocol.states import CertificateState


def url_of(env, apps_domain):
    """The custom domain once verified, else the platform subdomain."""
    return address(env.id, env.custom_domain, env.custom_domain_verified, apps_domain)


def address(env_id, custom_domain, verified, apps_domain):
    """url_of from the environment's fields (a list read as tuples)."""
    if custom_domain and verified:
        return f"https://{custom_domain}"
    return f"https://{env_id.hex[:12]}.{apps_domain}"


def _project(actor, project_id):
    project = projects_for(actor).where(Project.id == project_id).first()
    if project is None:
        raise NotFound("Project not found.")
    return project


def environments_of(actor, project_id, status=None):
    """Active environments of a project, oldest first; `status` is case-insensitive."""
    project = _project(actor, project_id)
    query = Environment.select().where(Environment.project == project.id, Environment.is_active)
    if status:
        query = query.where(Environment.status == status.strip().lower())
    return list(query.order_by(Environment.created_at, Environment.id)), project


def get_environment(actor, environment_id):
    return access.environment(actor, environment_id)


def update_environment(actor, environment_id, changes):
    """`changes` holds only the fields the client sent (`name`, `branch`). A new
    branch is used by the next deployment; nothing is redeployed now."""
    with database.atomic():
        env = access.environment(actor, environment_id)  # in scope, or 404
        fields = {f: changes[f] for f in ("name", "branch") if f in changes}
        if "name" in fields:
            fields["name"] = fields["name"].strip()
        return access.update_environment(env, fields)


def _create(project, server_id, berth, *, name, branch, environment_type, trigger,
            actor=None, allocation=None, commit=None):
    """Inside the caller's transaction: the environment (`deploying`) and its first
    deployment, queued for the server's agent."""
    env = Environment.create(
        project=project, server=server_id, name=name.strip(), environment_type=environment_type,
        status=lifecycle.check_move(None, states.EnvironmentStatus.DEPLOYING),
        branch=branch or project.default_branch or "main", updated_at=clock.now(),
        **(allocation or {}))
    events.record_created(env, project.organization_id)
    engine.start(env, TaskKind.DEPLOY, berth=berth, trigger=trigger,
                 actor=actor, created=True, record={"git_commit": commit} if commit else None)
    return env


def _check_allocation(allocation, server):
    """Each allocated resource fits the server (422 exceeds_server_capacity)."""
    for field, unit in (("cpu_cores", "CPU cores"), ("ram_mb", "MB of memory"),
                        ("disk_gb", "GB of disk")):
        total = getattr(server, field)
        if allocation.get(field) is not None and allocation[field] > total:
            raise ExceedsServerCapacity(f"{field}: the server has {total} {unit}.")


def create_environment(actor, project_id, *, name, berth, branch=None,
                       environment_type="development", **allocation):
    """201 with status `deploying`: the environment and its first deployment,
    queued for the server's agent in the same transaction. `allocation`
    (cpu_cores, ram_mb, disk_gb) becomes the containers' limits."""
    with database.atomic():
        project = _project(actor, project_id)
        if project.server_id is None:
            raise NoServer("The project has no server to deploy on.")
        _check_allocation(allocation, Server.get_by_id(project.server_id))
        actions.count_requested(berth, project.organization_id)
        with audit.quiet():  # its first deployment is part of the creation
            env = _create(project, project.server_id, berth, name=name, branch=branch,
                          environment_type=environment_type, trigger=states.Trigger.MANUAL,
                          actor=actor, allocation=allocation)
        audit.record(project.organization_id, "environment.create", "environment", env.id, {
            "name": env.name, "project_id": project.id, "branch": env.branch,
            "environment_type": environment_type, **allocation})
        return env


def create_preview(project, *, name, branch, berth, trigger, actor=None, commit=None,
                   **fields):
    """Inside the caller's transaction: a development environment of the project
    for a branch (an automation rule's preview or build), deployed on its server at
    the branch's head or at `commit`."""
    if project.server_id is None:
        raise NoServer("The project has no server to deploy on.")
    return _create(project, project.server_id, berth, name=name, branch=branch,
                   environment_type="development", trigger=trigger, actor=actor,
                   allocation=fields, commit=commit)


def auto_deploy(spec, server, images):
    """A registration token's `auto_deploy`, applied as its server registers (inside
    that transaction): an environment of the project on the new server. The agent
    receives its deployment as soon as it connects. `images`: config.images()."""
    project = Project.get_or_none(Project.id == spec["project_id"],
                                  Project.organization == server.organization_id,
                                  Project.deleted_at.is_null())
    if project is None:
        return None  # the project went away since the token was made: nothing to deploy
    return _create(project, server.id, Plain(images), name=spec.get("environment_name") or "production",
                   branch=spec.get("branch"),
                   environment_type=spec.get("environment_type") or "production",
                   trigger=states.Trigger.AUTO_DEPLOY)


def status_snapshot(actor, environment_id, apps_domain):
    env = get_environment(actor, environment_id)
    running = env.status == states.EnvironmentStatus.RUNNING
    # The spec: its containers run while it is running or paused; it serves only running.
    up = env.status in (states.EnvironmentStatus.RUNNING, states.EnvironmentStatus.PAUSED)
    last = (Deployment.select().where(Deployment.environment == env.id,
                                      engine.deployments())
            .order_by(Deployment.version.desc()).first())
    return {"environment_id": env.id, "status": env.status, "url": url_of(env, apps_domain),
            "container_running": up, "db_ready": running, "http_ok": running,
            "neutralized": env.neutralized, "anonymized": env.anonymized, "last_deploy": None if last is None else {
                "id": last.id, "status": states.snapshot_task_status(
                    last.status, agent_connected=_agent_connected(env.server_id)),
                "outcome": states.task_outcome(last.status),
                "started_at": last.started_at, "completed_at": last.completed_at},
            **_proxy(env, apps_domain)}


def _agent_connected(server_id):
    """Whether a task of this server can be dispatched now (`queued`) or waits
    for its agent (`pending`)."""
    server = server_id and Server.get_or_none(Server.id == server_id)
    return bool(server) and agents.is_connected(server)


def _proxy(env, apps_domain):
    """The server's proxy and the certificate of each name the environment answers
    at, as the agent last reported them (null and an empty list before any report)."""
    state = env.server_id and Server.select(Server.proxy_state).where(
        Server.id == env.server_id).scalar()
    if not state:
        return {"proxy": None, "certificates": []}
    known = state.get("certificates") or {}
    return {"proxy": {k: state.get(k) for k in ("running", "reason", "reported_at")},
            "certificates": [{"hostname": name, **known.get(name, {
                "state": CertificateState.PENDING, "valid_until": None, "reason": None})}
                for name in routes.hostnames(env, apps_domain)]}


def task_log(actor, environment_id, task_id=None, lines=200):
    """The newest `lines` lines of a task (the most recent one by default);
    `task_id` null when the environment has no such task (the spec)."""
    env = get_environment(actor, environment_id)
    query = Deployment.select().where(Deployment.environment == env.id)
    # The newest by creation: backups, restores and exports have no version.
    task = (query.where(Deployment.id == task_id).first() if task_id
            else query.order_by(Deployment.created_at.desc(), Deployment.id.desc()).first())
    if task is None:
        return {"task_id": None, "log": "", "lines": 0, "truncated": False}
    rows = list(TaskLogLine.select(TaskLogLine.message).where(TaskLogLine.deployment == task.id)
                .order_by(TaskLogLine.seq.desc()).limit(lines + 1).tuples())
    truncated = len(rows) > lines
    messages = [m for (m,) in reversed(rows[:lines])]
    return {"task_id": str(task.id), "log": "\n".join(messages), "lines": len(messages),
            "truncated": truncated}


def task_steps(actor, environment_id, task_id, lines=2000):
    """A task's newest `lines` log lines as steps: each with its level, when it was
    written (seconds after the task started) and how long it lasted (until the next
    line; the last one's only once the task ended). (steps, truncated)."""
    env = get_environment(actor, environment_id)
    task = Deployment.get_or_none(Deployment.id == task_id, Deployment.environment == env.id)
    if task is None:
        return [], False
    rows = list(TaskLogLine.select(TaskLogLine.created_at, TaskLogLine.level,
                                   TaskLogLine.message)
                .where(TaskLogLine.deployment == task.id)
                .order_by(TaskLogLine.seq.desc()).limit(lines + 1).tuples())
    truncated = len(rows) > lines
    rows = rows[:lines][::-1]
    start = task.started_at or task.created_at
    ends = [at for at, _, _ in rows[1:]] + ([task.completed_at] if rows else [])
    return [{"level": level, "message": message,
             "at": max(0.0, (at - start).total_seconds()),
             "took": (end - at).total_seconds() if end else None}
            for (at, level, message), end in zip(rows, ends, strict=True)], truncated


def tasks_of(actor, environment_id, limit=20):
    """An environment's newest tasks (deployments, backups, restores…), newest first."""
    env = get_environment(actor, environment_id)
    return list(Deployment.select().where(Deployment.environment == env.id)
                .order_by(Deployment.created_at.desc(), Deployment.id.desc()).limit(limit))


def deployed_between(actor, environment_id, start, end, limit=200):
    """The environment's deployments of code that succeeded between `start` and `end`
    (charts mark them): [(completed_at, version, kind, trigger)], oldest first."""
    env = get_environment(actor, environment_id)
    return list(Deployment.select(Deployment.completed_at, Deployment.version, Deployment.kind,
                                  Deployment.trigger)
                .where(Deployment.environment == env.id,
                       Deployment.status == states.DeploymentStatus.SUCCESS,
                       Deployment.kind.in_(kinds.names(deploys_code=True)),
                       Deployment.completed_at.between(start, end))
                .order_by(Deployment.completed_at).limit(limit).tuples())


def get_task(actor, task_id):
    try:
        d = access.deployment(actor, task_id)
    except NotFound:
        raise NotFound("Task not found.") from None
    d.task_status = states.task_status(d.status, agent_connected=_agent_connected(
        Environment.select(Environment.server).where(Environment.id == d.environment_id)
        .scalar()))
    return d


ACTIONS = (TaskKind.DEPLOY, TaskKind.REDEPLOY, TaskKind.RESTART, TaskKind.START, TaskKind.STOP)


def offered_actions(env):
    """The actions a person may start on the environment now, as the lifecycle
    allows them (none while a task is in progress): what the console offers."""
    return lifecycle.offered(env.status, has_containers=engine.has_containers(env),
                             busy=engine.in_progress(env.id), kinds=ACTIONS)


def act(actor, environment_id, action, *, berth):
    """An action (or deletion) as a task: 202 at once, the work on the server.
    One queued-or-running task per environment (409 task_in_progress)."""
    with database.atomic():
        env = access.environment(actor, environment_id, lock=True)
        task = actions.act(env, action, actor, berth=berth,
                           conflict=actions.TASK_IN_PROGRESS)
    status = states.task_status(task.status, agent_connected=_agent_connected(env.server_id))
    return {"task_id": task.id, "status": status, "environment_id": env.id,
            "poll_url": f"/api/public/v1/deployments/{task.id}"}


def delete_environment(actor, environment_id, confirm, *, berth):
    """Irreversible: containers, database and filestore go (202 with the task)."""
    access.environment(actor, environment_id)  # 404 before 400
    if confirm != "true":
        raise ConfirmRequired("Send the header 'X-Confirm-Delete: true' to delete an "
                              "environment.")
    return act(actor, environment_id, TaskKind.DELETE, berth=berth)
