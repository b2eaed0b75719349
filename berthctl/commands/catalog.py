"""Reading what there is: projects, servers, automation rules, the audit log."""

import datetime as dt
import re

import click

from berthctl.output import emit

PAGE = 100  # the APIs' largest cursor page


def all_pages(client, path, limit=None, **params):
    """Follow a cursor list (`{data, pagination}`) until its end or `limit` rows."""
    rows, cursor = [], None
    while True:
        size = PAGE if limit is None else max(1, min(PAGE, limit - len(rows)))
        page = client.get(path, limit=size, cursor=cursor, **params)
        rows.extend(page["data"])
        cursor = page["pagination"].get("next_cursor")
        if not cursor or not page["pagination"].get("has_more", True) \
                or (limit is not None and len(rows) >= limit):
            return rows[:limit] if limit is not None else rows


@click.group()
def projects():
    """Projects."""


@projects.command("list")
@click.pass_obj
def projects_list(state):
    """The active projects the key can see."""
    rows = all_pages(state.client, "/projects")
    emit(state, rows, [("ID", "id"), ("NAME", "name"), ("ERP", "erp_version"),
                       ("BRANCH", "default_branch"), ("ENVS", "environment_count"),
                       ("SERVER", "server_id")])


@click.group()
def servers():
    """Servers."""


@servers.command("list")
@click.pass_obj
def servers_list(state):
    """The servers available to the organization."""
    rows = all_pages(state.client, "/servers")
    emit(state, rows, [("ID", "id"), ("NAME", "name"), ("PROVIDER", "provider"),
                       ("CPU", "cpu_cores"), ("RAM_MB", "ram_mb"), ("DISK_GB", "disk_gb"),
                       ("ENVS", "environment_count")])


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
@click.argument("project_id")
@click.pass_obj
def rules_list(state, project_id):
    """A project's automation rules."""
    emit(state, all_pages(state.client, f"/projects/{project_id}/automation-rules"),
         RULE_COLUMNS)


@rules.command("show")
@click.argument("rule_id")
@click.pass_obj
def rules_show(state, rule_id):
    """A rule."""
    emit(state, state.client.get(f"/automation-rules/{rule_id}"))


@rules.command("run")
@click.argument("rule_id")
@click.pass_obj
def rules_run(state, rule_id):
    """Run a rule now (its run may be `skipped`, with the reason)."""
    emit(state, state.client.post(f"/automation-rules/{rule_id}/run"), RUN_COLUMNS)


@rules.command("runs")
@click.argument("rule_id")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.pass_obj
def rules_runs(state, rule_id, limit):
    """A rule's runs, newest first."""
    emit(state, all_pages(state.client, f"/automation-rules/{rule_id}/runs", limit=limit),
         RUN_COLUMNS)


@click.command()
@click.option("--action", help="e.g. project.update")
@click.option("--target", metavar="TYPE[:ID]", help="e.g. environment, or environment:ID")
@click.option("--actor", metavar="TYPE[:ID]", help="api_key, user or operator, with an id")
@click.option("--since", metavar="WHEN", help="A duration back from now (30m, 6h, 2d) or an "
              "ISO 8601 time (UTC when no offset).")
@click.option("--until", metavar="WHEN", help="Same forms as --since.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10000))
@click.pass_obj
def audit(state, action, target, actor, since, until, limit):
    """The organization's audit log, newest first (an organization-scoped key)."""
    params = {"action": action, "from": _when(since, "--since"), "to": _when(until, "--until")}
    for prefix, value in (("target", target), ("actor", actor)):
        if value:
            kind, _, ident = value.partition(":")
            params[f"{prefix}_type"], params[f"{prefix}_id"] = kind, ident or None
    rows = all_pages(state.client, "/audit-events", limit=limit, **params)
    emit(state, rows, [("TIME", "created_at"), ("ACTION", "action"),
                       ("ACTOR", lambda e: f"{e['actor']['type']}:{e['actor'].get('name') or e['actor'].get('id')}"),
                       ("TARGET", lambda e: f"{e['target_type']}:{e.get('target_id') or '-'}"),
                       ("IP", "source_ip")])


DURATION = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def _when(value, option):
    if not value:
        return None
    m = DURATION.match(value.strip())
    if m:
        moment = dt.datetime.now(dt.UTC) - dt.timedelta(**{UNITS[m[2]]: int(m[1])})
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        dt.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter("a duration (30m, 6h, 2d) or an ISO 8601 time",
                                 param_hint=option) from None
    return value


COMMANDS = [projects, servers, rules, audit]
