"""`berth admin rule ...`: a project's automation rules for operators (list,
create, run now), with the same checks as the public API."""

import click

from control_plane.agent_link import current_berth
from control_plane.cli.admin import UUID_T, _iso, admin, command, operator
from control_plane.services.automation.rules import ACTIONS, EVENTS

TRIGGERS = {"push": "git_push", "schedule": "schedule", "event": "event"}



def _run(run):
    if run is None:
        return None
    return {"id": str(run.id), "rule_id": str(run.rule_id), "trigger_type": run.trigger_type,
            "branch": run.branch, "actor": run.actor, "status": run.status, "reason": run.reason,
            "environment_id": run.environment_id and str(run.environment_id),
            "task_id": run.task and str(run.task), "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at)}


def _rule(rule):
    return {"id": str(rule.id), "project_id": str(rule.project_id), "name": rule.name,
            "enabled": rule.enabled, "trigger": rule.trigger, "action": rule.action,
            "next_run_at": _iso(rule.next_run_at), "created_at": _iso(rule.created_at),
            "last_run": _run(getattr(rule, "last_run", None))}


@admin.group()
def rule():
    """Automation rules of projects."""


@command(rule, "list")
@click.option("--project", "project_id", type=UUID_T, required=True)
def rule_list(project_id):
    """The project's rules, oldest first, each with its last run."""
    from control_plane.services.automation import rules

    return {"items": [_rule(r) for r in rules.rules_of(operator(), project_id)]}


@command(rule, "create")
@click.option("--project", "project_id", type=UUID_T, required=True)
@click.option("--name", required=True)
@click.option("--on", "on", type=click.Choice(list(TRIGGERS)), required=True,
              help="push (--branch), schedule (--cron, --timezone) or event (--event, --of)")
@click.option("--branch", help="push: a branch or a glob such as feature/*")
@click.option("--cron", help="schedule: five fields, e.g. '0 3 * * *'")
@click.option("--timezone", default="UTC", show_default=True, help="schedule: an IANA name")
@click.option("--event", type=click.Choice(EVENTS), help="event: which")
@click.option("--of", "watched", type=UUID_T, help="event: whose (an environment)")
@click.option("--action", "action", type=click.Choice(ACTIONS), required=True)
@click.option("--environment", "env_id", type=UUID_T,
              help="deploy, backup: the environment; copy_database: the target")
@click.option("--source", "source_id", type=UUID_T,
              help="copy_database, preview: whose newest backup is restored")
@click.option("--fresh", is_flag=True, help="copy_database: back the source up first")
@click.option("--allow-production", is_flag=True, help="copy_database into production")
@click.option("--ttl-hours", type=int, help="preview: deleted after this long without a push")
@click.option("--max-environments", type=int, help="preview: at most this many")
@click.option("--disabled", is_flag=True, help="Created disabled")
def rule_create(project_id, name, on, branch, cron, timezone, event, watched, action, env_id,
                source_id, fresh, allow_production, ttl_hours, max_environments, disabled):
    """Create a rule; every problem is named as the public API names it."""
    from control_plane.services.automation import rules

    trigger = {"type": TRIGGERS[on], "branch": branch, "cron": cron, "timezone": timezone,
               "event": event, "environment_id": watched and str(watched)}
    given = {"type": action, "environment_id": env_id and str(env_id),
             "source_environment_id": source_id and str(source_id), "fresh": fresh,
             "allow_production": allow_production, "ttl_hours": ttl_hours,
             "max_environments": max_environments}
    given = {k: v for k, v in given.items() if v is not None}
    created = rules.create(operator(), project_id, name=name, trigger=trigger, action=given,
                           enabled=not disabled)
    return _rule(created)


@command(rule, "run")
@click.argument("rule_id", type=UUID_T)
def rule_run(rule_id):
    """Run a rule now (trigger manual, actor operator); prints the run."""
    from control_plane.services.automation import runs

    return _run(runs.run_now(operator(), rule_id, berth=current_berth()))
