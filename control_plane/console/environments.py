"""An environment's page: status, actions, task history with the live task log,
runtime logs, charts, backups and restore drills (their forms: console/backups.py),
domains and configuration."""

import uuid

from flask import redirect, request, url_for

from control_plane.api.ops.domains import AddDomainBody
from control_plane.console import (
    FormInvalid,
    actor,
    berth,
    blp,
    config_form,
    confirm,
    form,
    render,
)
from control_plane.console.form_errors import beside
from control_plane.console.panels import panel_digest, polled
from control_plane.services.backups import backups, drills, wal
from control_plane.services.deploys import config_change, operations
from control_plane.services.deploys import environments as envs
from control_plane.services.environment_settings import access, domains
from control_plane.services.servers import monitoring, sizes
from control_plane.services.tasks import kinds
from control_plane.vocabulary import states
from control_plane.vocabulary.errors import (
    ApiError,
    DomainInUse,
    DomainLimitReached,
    InvalidConfiguration,
    InvalidDomain,
    NotFound,
)

LIVE = (states.TaskStatus.PENDING, states.TaskStatus.QUEUED, states.TaskStatus.RUNNING)


@blp.app_template_global()
def took(start, end):
    """How long a task ran, as a person says it: 42 s, 3 min 5 s, 1 h 2 min."""
    seconds = max(0, round((end - start).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


@blp.app_template_global()
def task_name(task):
    """A task as a person names it: its kind, or for a rollback, to which version."""
    if task.trigger != states.Trigger.ROLLBACK:
        return task.kind
    version = (task.extra_data or {}).get("rollback_to_version")
    return f"rollback to version {version}" if version else "rollback"


def _status(env_id):
    snapshot = envs.status_snapshot(actor(), env_id, berth().settings["APPS_DOMAIN"])
    snapshot["status"] = states.public_environment_status(snapshot["status"])
    if snapshot["last_deploy"]:  # its kind, for the panel to name it
        snapshot["last_task"] = envs.get_task(actor(), snapshot["last_deploy"]["id"])
    return snapshot


def _tasks(env_id):
    """The newest tasks; a rollback is offered to each deployment a rollback would
    accept, except to the code the environment runs now."""
    tasks = envs.tasks_of(actor(), env_id)
    running = _running(tasks)
    return [{"task": t, "status": states.task_status(t.status),
             "rollback": operations.rollbackable(t) and t.id not in running} for t in tasks]


def _running(tasks):
    """The ids of the deployment whose code runs now (the newest successful one that
    deployed code; `tasks` are newest first) and, when it is a rollback, of its target:
    rolling back to either would change nothing."""
    current = _current(tasks)
    return {current.id, current.rollback_from_id} if current else set()


def _current(tasks):
    """The deployment whose code runs now: the newest successful one that deployed
    code (`tasks` are newest first), or None."""
    return next((t for t in tasks if t.status == states.DeploymentStatus.SUCCESS
                 and t.kind in kinds.names(deploys_code=True)), None)


@blp.get("/environments/<uuid:env_id>")
def environment(env_id):
    return _page(env_id)


def _page(env_id, code=200, **form_state):
    env = envs.get_environment(actor(), env_id)
    tasks = _tasks(env_id)
    shown = request.args.get("task") or (str(tasks[0]["task"].id) if tasks else None)
    config, status = config_change.read(actor(), env_id), _status(env_id)
    return render("environment.html", code, env=env, status=status, tasks=tasks,
                  seen=panel_digest("_status.html", env_id=env_id, status=status),
                  current=_current([row["task"] for row in tasks]),
                  log=_log(env_id, shown), actions=envs.offered_actions(env),
                  backups=backups.list_backups(actor(), env_id, page_size=50)["items"],
                  drills=drills.page(actor(), env_id, page_size=5)["items"],
                  wal=wal.get(actor(), env_id), size=sizes.size_report(actor(), env_id),
                  domains=[domains.describe(d, env, berth().settings["APPS_DOMAIN"])
                           for d in domains.list_of(env)],
                  config=config, fields=config_form.fields(config), **form_state)


@blp.get("/environments/<uuid:env_id>/status-panel")
def status_panel(env_id):
    return polled("_status.html", env_id=env_id, status=_status(env_id))


@blp.get("/environments/<uuid:env_id>/tasks-panel")
def tasks_panel(env_id):
    return render("_tasks.html", env_id=env_id, tasks=_tasks(env_id))


def _log(env_id, task_id):
    """A task's log and whether it is still being written (then the page polls it)."""
    if task_id is None:
        return None
    try:  # an id that is not a UUID is no task (PostgreSQL would refuse it: a 500)
        task = envs.get_task(actor(), uuid.UUID(task_id))
    except (ValueError, ApiError):
        return None
    if task.environment_id != env_id:
        return None
    steps, truncated = envs.task_steps(actor(), env_id, task.id)
    return {"task": task, "steps": steps, "truncated": truncated,
            "text": "\n".join(step["message"] for step in steps),
            "live": task.task_status in LIVE}


@blp.get("/environments/<uuid:env_id>/task-log")
def task_log(env_id):
    return render("_task_log.html", env_id=env_id, log=_log(env_id, request.args.get("task")))


SOURCES = ("container", "postgres")  # the runtime-log sources the agents read


def _source():
    source = request.args.get("source", "container")
    return source if source in SOURCES else "container"


@blp.get("/environments/<uuid:env_id>/runtime-logs")
def runtime_logs(env_id):
    """The last lines, each with its level (the page filters and searches them, and
    asks again every few seconds while following)."""
    source = _source()
    try:
        logs, problem = monitoring.runtime_logs(actor(), env_id, source, 300, berth()), None
    except ApiError as err:  # shown in the panel (htmx swaps in a 200 only)
        if isinstance(err, NotFound):
            raise
        logs, problem = None, err.message
    lines = monitoring.leveled(logs["log"]) if logs else []
    return render("_runtime_logs.html", logs=logs, lines=lines, problem=problem)


@blp.get("/environments/<uuid:env_id>/runtime-logs.txt")
def download_runtime_logs(env_id):
    """The last 1,000 lines as a file."""
    source = _source()
    logs = monitoring.runtime_logs(actor(), env_id, source, 1000, berth())
    name = f"{env_id}-{source}.log"
    return logs["log"] + "\n", 200, {"Content-Type": "text/plain; charset=utf-8",
                                      "Content-Disposition": f'attachment; filename="{name}"'}


@blp.post("/environments/<uuid:env_id>/actions/<any(deploy,redeploy,restart,start,stop):action>")
def act(env_id, action):
    env = envs.get_environment(actor(), env_id)
    if action != "start" and (asked := confirm(action, f"{action.capitalize()} {env.name}?",
                                               name=_typed(env))):
        return asked
    task = envs.act(actor(), env_id, action, berth=berth())
    return redirect(url_for("console.environment", env_id=env_id, task=task["task_id"],
                            done=action), 303)


def _typed(env):
    """Production environments' disruptive actions ask for the name typed again."""
    return env.name if env.environment_type == "production" else None


def confirmed(env):
    """Destructive actions (destroy, restore): the environment's name typed again."""
    if request.form.get("confirm_name", "").strip() != env.name:
        said = f"Type the environment's name, {env.name}, exactly to confirm."
        raise FormInvalid(said, fields={"confirm_name": said})


@blp.post("/environments/<uuid:env_id>/destroy")
def destroy(env_id):
    env = envs.get_environment(actor(), env_id)
    confirmed(env)
    envs.delete_environment(actor(), env_id, "true", berth=berth())
    return redirect(url_for("console.project", project_id=env.project_id, done="destroy"), 303)


@blp.post("/deployments/<uuid:task_id>/rollback")
def rollback(task_id):
    target = envs.get_task(actor(), task_id)
    env = envs.get_environment(actor(), target.environment_id)
    commit = f", commit {target.git_commit[:10]}" if target.git_commit else ""
    if asked := confirm("rollback", f"Roll {env.name} back to version {target.version}"
                                    f"{commit}?", name=_typed(env)):
        return asked
    d = operations.rollback(actor(), task_id, berth())
    return redirect(url_for("console.environment", env_id=d.environment_id, task=d.id,
                            done="rollback"), 303)


# --- domains and configuration ---------------------------------------------------------

@blp.post("/environments/<uuid:env_id>/domains")
def add_domain(env_id):
    body = form(AddDomainBody())
    env = access.environment(actor(), env_id, "project.environments.deploy")
    with beside("domain", InvalidDomain, DomainLimitReached, DomainInUse):
        domains.add(env, body["domain"], berth().settings["APPS_DOMAIN"])
    return redirect(url_for("console.environment", env_id=env_id) + "#domains", 303)


@blp.post("/environments/<uuid:env_id>/domains/<string:name>/<any(verify,remove):op>")
def change_domain(env_id, name, op):
    env = access.environment(actor(), env_id, "project.environments.deploy")
    if op == "remove" and (asked := confirm("remove domain", f"Remove {name} from {env.name}?")):
        return asked
    getattr(domains, op)(env, name, berth())
    return redirect(url_for("console.environment", env_id=env_id) + "#domains", 303)


@blp.post("/environments/<uuid:env_id>/config")
def change_config(env_id):
    """The form's variables, ERP options and PostgreSQL settings, as the operations
    API's PATCH takes them (only what changed); refused fields are said beside each,
    on the page again with what was typed."""
    current = config_change.read(actor(), env_id)
    changes = config_form.changes(request.form, current)
    if not changes:
        return redirect(url_for("console.environment", env_id=env_id, done="nothing")
                        + "#config-h", 303)
    try:
        _, deployment = config_change.change(actor(), env_id, changes, berth=berth())
    except InvalidConfiguration as err:
        return _page(env_id, 422, config_errors=err.extra.get("details", {}), typed=request.form,
                     config_message=err.message)
    task = deployment.id if deployment else None
    return redirect(url_for("console.environment", env_id=env_id, task=task,
                            done="configuration" if task else "saved") + "#config-h", 303)
