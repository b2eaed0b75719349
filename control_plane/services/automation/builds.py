"""Builds: a `test` rule (trigger `git_push`) builds each push of a matching branch.

- `create`: a throwaway development environment (`build-<branch>-<commit>`) deployed
  at the pushed commit; `copy`, with `source_environment_id`: the source's newest
  completed backup restored into it, neutralised; `test`: the agent installs or
  updates the modules the push changed, and those depending on them, with their
  tests (agent/deploy/module_tests.py); each test's outcome is read from the ERP's
  log (test_log.py).
- The environment then stays `keep_hours` for inspection, or goes at once when the
  build passed and `remove_on_success` says so (the previews' expiry removes it).
- A server runs BUILDS_PER_SERVER builds at once: a later one waits, `queued`, and
  starts when one ends. A newer push of the branch cancels the rule's older builds.

Events: `build.started`, `build.completed` (passed), `build.failed` (failed, error
or cancelled: `status` says)."""

import datetime as dt

import peewee

from control_plane import events
from control_plane.events import Name
from control_plane.infra import clock, nudge
from control_plane.infra.db import after_commit
from control_plane.infra.pagination import CursorList
from control_plane.models import AutomationRun, Build, Deployment, Environment, Project
from control_plane.services.accounts import actors
from control_plane.services.accounts.scope import projects_for
from control_plane.services.automation import previews, test_log
from control_plane.services.deploys import environments as envs
from control_plane.services.environment_settings import configuration
from control_plane.services.tasks import engine, kinds
from control_plane.vocabulary import errors, states
from protocol.kinds import CommandKind, TaskKind

D = states.DeploymentStatus
QUEUED, RUNNING, PASSED, FAILED, ERROR, CANCELLED = (
    "queued", "running", "passed", "failed", "error", "cancelled")
STATUSES = (QUEUED, RUNNING, PASSED, FAILED, ERROR, CANCELLED)
ACTIVE = (QUEUED, RUNNING)
DEFAULT_KEEP_HOURS = 4
TIME_LIMIT = dt.timedelta(hours=2)


# --- the stages ---------------------------------------------------------------------

def start(rule, run, *, berth, trigger, end_run, commit=None, base=None):
    """(task id, stage) of the build's next step (runs.act), or (None, None) while the
    server runs as many builds as it may (the run waits for the scheduler's job).
    `end_run(rule, run, status, reason)`: how a cancelled build's waiting run ends."""
    if run.stage == "remove":  # a build's environment, once kept long enough
        return previews.start(rule, run, berth=berth, trigger=trigger)
    build = Build.get_or_none(Build.run_id == run.id)
    if build is None:
        build = _new(rule, run, commit, base, end_run)
    if build.status not in ACTIVE:
        raise errors.Conflict(f"The build is {build.status}.")
    if run.stage == "copy":
        return previews.start(rule, run, berth=berth, trigger=trigger)
    if run.stage == "test":
        env = Environment.get_or_none(Environment.id == run.environment_id,
                                      Environment.is_active)
        if env is None:
            raise errors.NotFound("The build's environment is gone.")
        d = engine.start(env, TaskKind.TEST, berth=berth, trigger=trigger,
                         base_commit=build.base_commit)
        _update(build, stage="test")
        return d.id, "test"
    project = Project.get_by_id(rule.project_id)
    if project.server_id is None:
        raise errors.NoServer("The project has no server to deploy on.")
    limit = berth.settings.get("BUILDS_PER_SERVER", 1)
    if Build.select().where(Build.server_id == project.server_id, Build.status == RUNNING,
                            Build.id != build.id).count() >= limit:
        return None, None
    env = envs.create_preview(project, name=f"build-{previews.slug(run.branch)[:40]}-"
                                            f"{(build.commit or 'head')[:7]}",
                              branch=run.branch, berth=berth, trigger=trigger,
                              actor=actors.of_rule(rule), commit=build.commit,
                              preview_rule=rule.id, last_pushed_at=clock.now())
    run.environment_id = env.id
    _update(build, status=RUNNING, stage="create", environment_id=env.id,
            server_id=project.server_id, started_at=clock.now())
    events.record_build(build, Name.BUILD_STARTED)
    first = (Deployment.select(Deployment.id).where(Deployment.environment == env.id)
             .order_by(Deployment.created_at.desc()).first())
    return first.id, "create"


def _new(rule, run, commit, base, end_run):
    """The build of a push, `queued`; the rule's older builds of the branch cancelled."""
    project = Project.get_by_id(rule.project_id)
    build = Build.create(organization=project.organization_id, project=project.id,
                         rule_id=rule.id, run_id=run.id, branch=run.branch, commit=commit,
                         base_commit=base, status=QUEUED, server_id=project.server_id)
    for older in Build.select().where(Build.rule_id == rule.id, Build.branch == run.branch,
                                      Build.status.in_(ACTIVE), Build.id != build.id):
        _cancel(rule, older, end_run)
    return build


def _cancel(rule, build, end_run):
    """A newer push of its branch: its task cancelled (runs.follow then ends its
    run), or its waiting run ended; the environment removed by the expiry."""
    _finish(build, CANCELLED, reason="a newer push of the branch", keep=False)
    run = AutomationRun.get_or_none(AutomationRun.id == build.run_id)
    if run is None:
        return
    task = Deployment.get_or_none(Deployment.id == run.task) if run.task else None
    if task is not None and task.status in engine.ACTIVE:
        engine.settle(task, engine.Outcome(
            D.CANCELLED, withdraw="a newer push of the branch",
            log=("warning", "Cancelled: a newer push of the branch has its own build.")))
    end_run(rule, run, states.RunStatus.SKIPPED, "cancelled: a newer push of the branch")


def follow(rule, run, build, outcome):
    """A stage's task ended: the build's next stage (returned: the run's next step
    waits for the scheduler's job), or its end (None)."""
    if build.status not in ACTIVE:
        return None
    if not outcome.ok:
        why = outcome.error or ("cancelled" if outcome.status == D.CANCELLED
                                else "the task failed")
        _finish(build, ERROR, reason=f"{run.stage}: {why}", rule=rule)
        return None
    if run.stage in ("create", "copy"):
        copy = run.stage == "create" and rule.action.get("source_environment_id")
        _update(build, stage="copy" if copy else "test")
        return "copy" if copy else "test"
    result = outcome.result or {}
    tests, counts, _summary = test_log.parse(result.get("log") or "")
    status = PASSED if result.get("exit_code") == 0 and not (
        counts["failed"] or counts["error"]) else FAILED
    reason = None if status == PASSED else (
        f"{counts['failed']} failed, {counts['error']} error(s) of {counts['tests']} tests"
        if tests else f"the tests exited {result.get('exit_code')}")
    _finish(build, status, reason=reason, rule=rule, modules=result.get("modules") or [],
            tests=tests, counts=counts, log=result.get("log") or "")
    return None


def _finish(build, status, *, reason=None, rule=None, keep=True, **fields):
    now = clock.now()
    _update(build, status=status, reason=reason, finished_at=now, **fields)
    events.record_build(build, Name.BUILD_COMPLETED if status == PASSED else Name.BUILD_FAILED)
    if build.environment_id is None:
        return
    action = (rule.action if rule else {}) or {}
    keep_for = dt.timedelta(hours=action.get("keep_hours") or DEFAULT_KEEP_HOURS)
    at_once = not keep or (status == PASSED and action.get("remove_on_success", True))
    # The previews' expiry removes it once `keep_hours` passed since this moment.
    Environment.update(last_pushed_at=now - keep_for if at_once else now).where(
        Environment.id == build.environment_id).execute()


def _update(build, **fields):
    Build.update(**fields).where(Build.id == build.id).execute()
    for name, value in fields.items():
        setattr(build, name, value)
    if "status" in fields or "stage" in fields:  # on its commit within moments
        after_commit(lambda: nudge.nudge("commit-statuses"))


# --- the task ---------------------------------------------------------------------------

def _payload(task, env, settings, *, base_commit=None):
    return {"environment_id": str(env.id), "deployment_id": str(task.id),
            "erp_image": settings["ERP_IMAGE"].format(
                erp_version=env.project.effective_erp_version),
            "base_commit": base_commit, "default_branch": env.project.default_branch or "main",
            **configuration.agent_fields(configuration.snapshot(env))}


kinds.register(kinds.Kind(TaskKind.TEST, CommandKind.TEST, payload=_payload,
                          is_deployment=False, failure="the tests did not run",
                          time_limit=lambda payload: TIME_LIMIT))


# --- reading --------------------------------------------------------------------------

LISTED = tuple(f for f in Build._meta.sorted_fields if f.name not in ("log", "tests"))


def _listed(project_id, *branch, shape):
    query = Build.select(*LISTED).where(Build.project == project_id)
    return query.where(Build.branch == branch[0]) if "branch" in shape else query


BUILDS = CursorList("builds", Build, _listed, newest_first=True)


def list_builds(actor, project_id, *, limit, cursor, branch=None):
    """A project's builds, newest first (without their tests and log); of one branch."""
    project = _project(actor, project_id)
    if branch:
        return BUILDS.page(project.id.hex, branch, shape=("branch",), limit=limit,
                           cursor=cursor)
    return BUILDS.page(project.id.hex, limit=limit, cursor=cursor)


def of_run(run_id):
    return Build.get_or_none(Build.run_id == run_id)


def get_build(actor, build_id):
    """The build with its tests and log, as a row (the list's shape)."""
    build = Build.get_or_none(Build.id == build_id)
    if build is None or not projects_for(actor).where(Project.id == build.project_id).exists():
        raise errors.NotFound("No such build.")
    return {**{f.name: getattr(build, f.name) for f in Build._meta.sorted_fields
               if not isinstance(f, peewee.ForeignKeyField)},
            "project": build.project_id, "organization": build.organization_id}


def _project(actor, project_id):
    project = projects_for(actor).where(Project.id == project_id).first()
    if project is None:
        raise errors.NotFound("No such project.")
    return project
