"""`berthctl rules`: automation rules of projects, and their runs."""

import click

from berthctl.commands import ID
from berthctl.output import emit
from berthctl.pages import all_pages

RULE_COLUMNS = [("ID", "id"), ("NAME", "name"), ("ENABLED", "enabled"),
                ("TRIGGER", lambda r: r["trigger"].get("type")),
                ("ACTION", lambda r: r["action"].get("type")),
                ("LAST RUN", lambda r: (r.get("last_run") or {}).get("status"))]
RUN_COLUMNS = [("ID", "id"), ("TRIGGER", "trigger_type"), ("STATUS", "status"),
               ("STARTED", "started_at"), ("TASK", "task_id"), ("REASON", "reason")]


@click.group()
def rules():
    """Automation rules of projects."""


@rules.command("list")
@click.argument("project_id", type=ID)
@click.pass_obj
def rules_list(state, project_id):
    """A project's automation rules."""
    emit(state, all_pages(state.client, f"/projects/{project_id}/automation-rules"),
         RULE_COLUMNS)


@rules.command("show")
@click.argument("rule_id", type=ID)
@click.pass_obj
def rules_show(state, rule_id):
    """A rule."""
    emit(state, state.client.get(f"/automation-rules/{rule_id}"))


@rules.command("run")
@click.argument("rule_id", type=ID)
@click.pass_obj
def rules_run(state, rule_id):
    """Run a rule now (its run may be `skipped`, with the reason)."""
    emit(state, state.client.post(f"/automation-rules/{rule_id}/run"), RUN_COLUMNS)


@rules.command("runs")
@click.argument("rule_id", type=ID)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.pass_obj
def rules_runs(state, rule_id, limit):
    """A rule's runs, newest first."""
    emit(state, all_pages(state.client, f"/automation-rules/{rule_id}/runs", limit=limit),
         RUN_COLUMNS)


COMMANDS = [rules]
