"""Preview environments: a `preview` rule (trigger `git_push`) gives each matching
branch a development environment of its own, with its own URL.

- The first push of a branch makes it (name `preview-<branch>`), deploys it, and
  then, with `source_environment_id`, restores the source's newest completed
  backup into it, neutralised. Later pushes deploy the pushed commit.
- The push of the branch's deletion, or `ttl_hours` without a push, deletes it
  (containers, database and files).
- At most `max_environments` a rule; and a server takes a new one only while the
  memory its environments claim (their `ram_mb`, or ASSUMED_RAM_MB each) leaves
  room for one more. Past either bound the run is `skipped`, saying which.

A run of a preview rule names its step in `stage`: `create`, `deploy`, `copy`
(the source's backup restored) or `remove`."""

import re

from peewee import fn

from control_plane.infra import clock
from control_plane.models import Deployment, Environment, Project, Server
from control_plane.services.accounts import actors
from control_plane.services.backups import backups
from control_plane.services.deploys import actions
from control_plane.services.deploys import environments as envs
from control_plane.services.tasks import engine
from control_plane.vocabulary import errors
from protocol.kinds import TaskKind

DEFAULT_TTL_HOURS, DEFAULT_MAX = 168, 5
ASSUMED_RAM_MB = 1024  # what an ERP with its database needs when it names no limit


def slug(branch):
    return re.sub(r"[^a-z0-9]+", "-", branch.lower()).strip("-")[:60] or "branch"


def of_branch(rule, branch):
    """The rule's live preview environment of the branch, or None."""
    return (Environment.select().where(Environment.preview_rule == rule.id,
                                       Environment.branch == branch, Environment.is_active)
            .order_by(Environment.created_at.desc()).first())


def _room(rule, project):
    limit = rule.action.get("max_environments") or DEFAULT_MAX
    live = Environment.select().where(Environment.preview_rule == rule.id,
                                      Environment.is_active).count()
    if live >= limit:
        raise errors.PreviewBoundReached(f"the rule has {live} preview environments, its max_environments")
    server = Server.get_or_none(Server.id == project.server_id)
    if server is None:
        raise errors.NoServer("The project has no server to deploy on.")
    claimed = (Environment.select(fn.SUM(fn.COALESCE(Environment.ram_mb, ASSUMED_RAM_MB)))
               .where(Environment.server == server.id, Environment.is_active).scalar() or 0)
    if claimed + ASSUMED_RAM_MB > server.ram_mb:
        raise errors.PreviewBoundReached(f"server {server.name} has no room: its environments claim {claimed} MB "
                      f"of its {server.ram_mb} MB")


def start(rule, run, *, berth, trigger, commit=None):
    """(task id, stage) of the run's next step; the run's `environment_id` is set
    when it makes the environment."""
    if run.stage == "remove":
        env = _active(run.environment_id)
        actions.refuse_if_busy(env, actions.TASK_IN_PROGRESS)
        d = engine.start(env, TaskKind.DELETE, berth=berth,
                         trigger=trigger)
        return d.id, "remove"
    if run.stage == "copy":
        env = _active(run.environment_id)
        source = rule.action["source_environment_id"]
        d = backups.restore(env, backups.newest_completed(source),
                            actor=actors.of_rule(rule), berth=berth, trigger=trigger,
                            profile=rule.action.get("neutralize_profile"),
                            anonymize=rule.action.get("anonymize"))
        return d.id, "copy"
    env = of_branch(rule, run.branch)
    if env is not None:
        actions.refuse_if_busy(env, actions.TASK_IN_PROGRESS)
        engine.check_allowed(env, TaskKind.DEPLOY)
        Environment.update(last_pushed_at=clock.now()).where(Environment.id == env.id).execute()
        d = engine.start(env, TaskKind.DEPLOY, berth=berth,
                         trigger=trigger, record={"git_commit": commit})
        run.environment_id = env.id
        return d.id, "deploy"
    project = Project.get_by_id(rule.project_id)
    _room(rule, project)
    env = envs.create_preview(project, name=f"preview-{slug(run.branch)}", branch=run.branch,
                              berth=berth, trigger=trigger, actor=actors.of_rule(rule),
                              preview_rule=rule.id, last_pushed_at=clock.now())
    run.environment_id = env.id
    first = (Deployment.select(Deployment.id).where(Deployment.environment == env.id)
             .order_by(Deployment.created_at.desc()).first())
    return first.id, "create"


def _active(env_id):
    env = Environment.get_or_none(Environment.id == env_id, Environment.is_active)
    if env is None:
        raise errors.NotFound("The preview environment is gone.")
    return env
