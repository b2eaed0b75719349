"""`berthctl audit`: the organization's audit log."""

import datetime as dt
import re

import click

from berthctl.output import emit
from berthctl.pages import all_pages


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


COMMANDS = [audit]
