"""Automation rules of a project: what happens on a push, on a schedule or after an
event, without a person. Checked (every problem named by its field, 422
`invalid_automation_rule`), stored, listed, changed and deleted here; runs.py
fires them and triggers.py finds the ones due.

A deleted rule stops at once; it and its runs stay readable for 90 days (the
spec's log retention), then housekeeping removes them."""

import datetime as dt
import fnmatch
import uuid

from control_plane.events import Name
from control_plane.infra import clock
from control_plane.infra.db import database, for_update
from control_plane.infra.newest import newest_rows
from control_plane.infra.pagination import CursorList
from control_plane.models import AutomationRule, AutomationRun, Environment, Project
from control_plane.services import audit
from control_plane.services.accounts.scope import projects_for
from control_plane.services.automation import schedules
from control_plane.services.backups.neutralize import PRODUCTION, PROFILES
from control_plane.vocabulary.errors import (
    AutomationRuleLimitReached,
    InvalidAutomationRule,
    NotFound,
)
from control_plane.vocabulary.states import AutomationAction, AutomationTrigger

# What a rule may hold, in the order the API documents them (as plain strings). A rule's
# trigger is never `manual`: that is a run asked for.
TRIGGERS = tuple(t.value for t in AutomationTrigger if t != AutomationTrigger.MANUAL)
ACTIONS = tuple(a.value for a in AutomationAction)
EVENTS = tuple(n.value for n in (Name.DEPLOY_COMPLETED, Name.DEPLOY_FAILED,
                                 Name.BACKUP_COMPLETED, Name.BACKUP_FAILED,
                                 Name.RESTORE_COMPLETED))
MAX_PER_PROJECT = 100
HISTORY = dt.timedelta(days=90)  # a deleted rule's runs stay readable this long
_ENV_FIELDS = {AutomationAction.DEPLOY: ("environment_id",),
               AutomationAction.BACKUP: ("environment_id",),
               AutomationAction.COPY_DATABASE: ("source_environment_id", "environment_id"),
               AutomationAction.PREVIEW: (), AutomationAction.TEST: ()}
_BOUNDS = {"ttl_hours": (1, 24 * 365, 168), "max_environments": (1, 50, 5)}  # min, max, default


# --- checking -------------------------------------------------------------------

def _branch_problem(branch):
    if not isinstance(branch, str) or not 1 <= len(branch) <= 255:
        return "A branch name or glob (`feature/*`), 1 to 255 characters."
    if any(c.isspace() or ord(c) < 32 or c == "\x7f" for c in branch):
        return "No spaces or control characters."
    return None


def _trigger(project, given, problems):
    kind = given.get("type")
    if kind not in TRIGGERS:
        problems["trigger.type"] = [f"One of {', '.join(TRIGGERS)}."]
        return None
    if kind == AutomationTrigger.GIT_PUSH:
        branch = given.get("branch")
        if (why := _branch_problem(branch)) is not None:
            problems["trigger.branch"] = [why]
        return {"type": kind, "branch": branch}
    if kind == AutomationTrigger.SCHEDULE:
        cron, zone = given.get("cron"), given.get("timezone") or "UTC"
        if not isinstance(cron, str) or not cron.strip():
            problems["trigger.cron"] = ["A cron expression (five fields) is required."]
        elif (found := schedules.problem(cron, zone)) is not None:
            problems[found[0]] = [found[1]]
        return {"type": kind, "cron": " ".join(str(cron).split()), "timezone": zone}
    event = given.get("event")
    if event not in EVENTS:
        problems["trigger.event"] = [f"One of {', '.join(EVENTS)}."]
    env = _environment(project, given.get("environment_id"), "trigger.environment_id",
                       problems)
    return {"type": kind, "event": event, "environment_id": env and str(env.id)}


def _environment(project, env_id, field, problems):
    env = None
    try:
        env_id = uuid.UUID(str(env_id)) if env_id is not None else None
    except ValueError:
        env_id = None
    if env_id is not None:
        env = Environment.get_or_none(Environment.id == env_id,
                                      Environment.project == project.id)
    if env is None:
        problems[field] = ["An environment of this project is required."]
    return env


def _action(project, given, problems):
    kind = given.get("type")
    if kind not in ACTIONS:
        problems["action.type"] = [f"One of {', '.join(ACTIONS)}."]
        return None
    envs = {name: _environment(project, given.get(name), f"action.{name}", problems)
            for name in _ENV_FIELDS[kind]}
    out = {"type": kind, **{name: env and str(env.id) for name, env in envs.items()}}
    if kind == AutomationAction.PREVIEW:
        return _copy_safety(given, _preview(project, given, out, problems), problems)
    if kind == AutomationAction.TEST:
        return _copy_safety(given, _test(project, given, out, problems), problems)
    if kind == AutomationAction.COPY_DATABASE:
        source, target = envs["source_environment_id"], envs["environment_id"]
        out["fresh"] = bool(given.get("fresh", False))
        out["allow_production"] = bool(given.get("allow_production", False))
        if source is not None and target is not None and source.id == target.id:
            problems["action.environment_id"] = ["The target must differ from the source."]
        elif target is not None and target.environment_type == PRODUCTION \
                and not out["allow_production"]:
            problems["action.allow_production"] = [
                "Copying a database into production replaces its data: say "
                "\"allow_production\": true to mean it."]
        _copy_safety(given, out, problems, production=target is not None
                     and target.environment_type == PRODUCTION)
    return out


def _copy_safety(given, out, problems, production=False):
    """A copying action's `neutralize_profile` and `anonymize`, kept when given: they
    raise the target's copy policy (services/backups/neutralize.py)."""
    if given.get("neutralize_profile") is not None:
        if given["neutralize_profile"] not in PROFILES:
            problems["action.neutralize_profile"] = [f"One of {', '.join(PROFILES)}."]
        out["neutralize_profile"] = given["neutralize_profile"]
    if given.get("anonymize") is not None:
        if not isinstance(given["anonymize"], bool):
            problems["action.anonymize"] = ["A JSON boolean."]
        out["anonymize"] = given["anonymize"]
    if production:
        for field in ("neutralize_profile", "anonymize"):
            if out.get(field):
                problems[f"action.{field}"] = [
                    "A copy into production is neither neutralised nor anonymised."]
    return out


def _source(project, given, out, problems):
    source = given.get("source_environment_id")
    if source is not None:
        env = _environment(project, source, "action.source_environment_id", problems)
        source = env and str(env.id)
    out["source_environment_id"] = source


def _preview(project, given, out, problems):
    _source(project, given, out, problems)
    for field, (low, high, default) in _BOUNDS.items():
        value = given.get(field, default)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            problems[f"action.{field}"] = [f"A whole number from {low} to {high}."]
        out[field] = value
    return out


def _test(project, given, out, problems):
    """A build's: where its data comes from (none: an empty database), how long its
    environment stays, and whether a passing build's goes at once."""
    _source(project, given, out, problems)
    low, high, default = 1, 24 * 7, 4
    value = given.get("keep_hours", default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        problems["action.keep_hours"] = [f"A whole number from {low} to {high}."]
    out["keep_hours"] = value
    removes = given.get("remove_on_success", True)
    if not isinstance(removes, bool):
        problems["action.remove_on_success"] = ["A JSON boolean."]
    out["remove_on_success"] = removes
    return out


def checked(project, name, trigger, action):
    """(trigger, action) in their stored shape; InvalidAutomationRule otherwise."""
    problems = {}
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 100:
        problems["name"] = ["1 to 100 characters."]
    trigger = _trigger(project, trigger or {}, problems)
    action = _action(project, action or {}, problems)
    if trigger and action and action["type"] in (AutomationAction.PREVIEW,
                                                 AutomationAction.TEST) \
            and trigger["type"] != AutomationTrigger.GIT_PUSH:
        problems["action.type"] = [f"A {action['type']} is made by a push: its trigger must "
                                   "be git_push."]
    if trigger and action and trigger["type"] == AutomationTrigger.EVENT and trigger["event"] and \
            trigger["environment_id"] == action.get("environment_id") and \
            trigger["event"].split(".")[0] == action["type"]:
        problems["action.type"] = ["An event rule cannot act on the event it waits for "
                                   "(its action would trigger it again)."]
    if problems:
        said = "; ".join(f"{field}: {why[0]}" for field, why in sorted(problems.items())[:3])
        raise InvalidAutomationRule(f"The rule was not saved: {said}", details=problems)
    return trigger, action


def branch_matches(rule, branch):
    """A push's branch against a git_push rule's glob (fnmatch: `*` also crosses `/`)."""
    return branch is not None and fnmatch.fnmatchcase(branch, rule.trigger["branch"])


def _columns(trigger, enabled, now):
    watched = trigger.get("environment_id") if trigger["type"] == AutomationTrigger.EVENT else None
    next_run = (schedules.next_after(trigger["cron"], trigger["timezone"], now)
                if trigger["type"] == AutomationTrigger.SCHEDULE and enabled else None)
    return {"trigger": trigger, "trigger_type": trigger["type"], "watched_environment": watched,
            "next_run_at": next_run}


# --- reading --------------------------------------------------------------------

def _listed(org, project_id, *scoped, shape):
    query = AutomationRule.select().where(AutomationRule.organization == org,
                                          AutomationRule.project == project_id,
                                          AutomationRule.deleted_at.is_null())
    return query


RULES = CursorList("automation_rules", AutomationRule, _listed, newest_first=False)


def project_for(actor, project_id, *, lock=False):
    query = projects_for(actor).where(Project.id == project_id)
    project = (for_update(query) if lock else query).first()
    if project is None:
        raise NotFound("Project not found.")
    return project


def rule_for(actor, rule_id, *, deleted=False, lock=False):
    """A rule the actor sees (404 otherwise); `deleted`: one deleted within the
    last 90 days too (its history)."""
    query = (AutomationRule.select().join(Project)
             .where(AutomationRule.id == rule_id, Project.deleted_at.is_null()))
    if actor.organization_id is not None:
        query = query.where(AutomationRule.organization == actor.organization_id)
    if actor.project_scoped:
        query = query.where(AutomationRule.project == actor.project_id)
    if deleted:
        query = query.where(AutomationRule.deleted_at.is_null()
                            | (AutomationRule.deleted_at > clock.now() - HISTORY))
    else:
        query = query.where(AutomationRule.deleted_at.is_null())
    rule = (for_update(query, of=AutomationRule) if lock else query).first()
    if rule is None:
        raise NotFound("Automation rule not found.")
    return rule


def with_last_runs(rules):
    """Each rule (a row, or a dict of a list page) with `last_run`: its newest run
    or None, read in one statement for them all."""
    def rule_id(r):
        return uuid.UUID(str(r["id"] if isinstance(r, dict) else r.id))
    ids = [rule_id(r) for r in rules]
    runs = {run.rule_id: run for run in newest_rows(
        AutomationRun, AutomationRun.rule, AutomationRun.created_at,
        lambda run: run.rule.in_(ids))}
    for r in rules:
        if isinstance(r, dict):
            r["last_run"] = runs.get(rule_id(r))
        else:
            r.last_run = runs.get(rule_id(r))
    return rules


def list_rules(actor, project_id, *, limit, cursor):
    project = project_for(actor, project_id)
    rows, meta = RULES.page(project.organization_id.hex, project.id.hex, limit=limit,
                            cursor=cursor)
    return with_last_runs(rows), meta


def rules_of(actor, project_id):
    """Every rule of a project the actor sees, oldest first (at most MAX_PER_PROJECT)."""
    project = project_for(actor, project_id)
    return with_last_runs(list(AutomationRule.select().where(
        AutomationRule.project == project.id, AutomationRule.deleted_at.is_null())
        .order_by(AutomationRule.created_at, AutomationRule.id)))


def get_rule(actor, rule_id):
    return with_last_runs([rule_for(actor, rule_id)])[0]


# --- changing -------------------------------------------------------------------

def create_rule(project, *, name, trigger, action, enabled=True, created_by=None):
    """Inside or outside a transaction: the project locked, its rules counted."""
    with database.atomic():
        project = for_update(Project.select().where(Project.id == project.id)).first()
        trigger, action = checked(project, name, trigger, action)
        count = AutomationRule.select().where(AutomationRule.project == project.id,
                                              AutomationRule.deleted_at.is_null()).count()
        if count >= MAX_PER_PROJECT:
            raise AutomationRuleLimitReached(
                f"A project has at most {MAX_PER_PROJECT} automation rules.")
        now = clock.now()
        rule = AutomationRule.create(organization=project.organization_id, project=project,
                                     name=name.strip(), enabled=enabled, action=action,
                                     created_by=created_by, updated_at=now,
                                     **_columns(trigger, enabled, now))
        audit.record(project.organization_id, "automation_rule.create", "automation_rule",
                     rule.id, {"project_id": project.id, "name": rule.name, "enabled": enabled,
                               "trigger": trigger, "action": action})
    rule.last_run = None
    return rule


def create(actor, project_id, **fields):
    """A rule of a project the actor sees, created by it."""
    return create_rule(project_for(actor, project_id), created_by=actor.public_id, **fields)


def update_rule(actor, rule_id, changes):
    """Omitted fields stay; `trigger` and `action` are replaced whole."""
    with database.atomic():
        rule = rule_for(actor, rule_id, lock=True)
        if changes:
            name = changes.get("name", rule.name)
            enabled = changes.get("enabled", rule.enabled)
            trigger, action = checked(rule.project, name, changes.get("trigger", rule.trigger),
                                      changes.get("action", rule.action))
            now = clock.now()
            fields = {"name": name.strip(), "enabled": enabled, "action": action,
                      "updated_at": now, **_columns(trigger, enabled, now)}
            AutomationRule.update(**fields).where(AutomationRule.id == rule.id).execute()
            for field, value in fields.items():
                setattr(rule, field, value)
            audit.record(rule.organization_id, "automation_rule.update", "automation_rule",
                         rule.id, changes)
    return get_rule(actor, rule_id)


def delete_rule(actor, rule_id):
    with database.atomic():
        rule = rule_for(actor, rule_id, lock=True)
        now = clock.now()
        AutomationRule.update(deleted_at=now, enabled=False, next_run_at=None, updated_at=now) \
            .where(AutomationRule.id == rule.id).execute()
        audit.record(rule.organization_id, "automation_rule.delete", "automation_rule", rule.id)


def sweep(now=None, batch=500):
    """Housekeeping: rules deleted more than 90 days ago, with their runs, at most
    `batch` rules a turn. Nothing to remove takes no write lock (SQLite: a turn of
    the scheduler must not stand in the way of requests that write)."""
    cutoff = (now or clock.now()) - HISTORY
    gone = [i for (i,) in AutomationRule.select(AutomationRule.id)
            .where(AutomationRule.deleted_at < cutoff).limit(batch).tuples()]
    if not gone:
        return 0
    with database.atomic():  # BEGIN IMMEDIATE on SQLite: waits its turn, never upgrades
        AutomationRun.delete().where(AutomationRun.rule.in_(gone)).execute()
        return AutomationRule.delete().where(AutomationRule.id.in_(gone)).execute()
