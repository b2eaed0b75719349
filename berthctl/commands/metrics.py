"""`berthctl metrics`: sparklines of the last hour from the metric history."""

import datetime as dt
import json

import click

from berthctl.commands import ID
from berthctl.output import echo, human_bytes, sparkline

ENV_SERIES = [("ERP CPU", "erp_cpu_percent", "%"), ("ERP memory", "erp_memory_used_bytes", "B"),
              ("DB CPU", "postgres_cpu_percent", "%"),
              ("DB memory", "postgres_memory_used_bytes", "B")]
SERVER_SERIES = [("CPU", "cpu_percent", "%"), ("Memory", "memory_percent", "%"),
                 ("Disk", "disk_percent", "%")]


@click.command()
@click.argument("env_id", required=False, type=ID)
@click.option("--server", "server_id", metavar="ID", type=ID, help="A server's host metrics instead.")
@click.option("--minutes", default=60, show_default=True, type=click.IntRange(5, 2880),
              help="How far back (one point a minute).")
@click.pass_obj
def metrics(state, env_id, server_id, minutes):
    """Sparklines of the last hour's CPU and memory, from the metric history."""
    if bool(env_id) == bool(server_id):
        raise click.UsageError("Give an ENV_ID or --server ID (one of them).")
    end = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    start = end - dt.timedelta(minutes=minutes)
    path = (f"/environments/{env_id}/metrics/history" if env_id
            else f"/servers/{server_id}/metrics/history")
    history = state.client.get(path, step="1m", **{"from": _iso(start), "to": _iso(end)})
    if state.output == "json":
        click.echo(json.dumps(history, indent=2))
        return
    slots = _slots(history["points"], start, minutes)
    echo(f"{history['from']} .. {history['to']}, one block a minute")
    for label, key, unit in ENV_SERIES if env_id else SERVER_SERIES:
        values = [(p[key] or {}).get("avg") if p else None for p in slots]
        present = [v for v in values if v is not None]
        fmt = (lambda v: f"{v:.1f}%") if unit == "%" else human_bytes
        summary = (f"now {fmt(present[-1])}  min {fmt(min(present))}  max {fmt(max(present))}"
                   if present else "no data")
        click.echo(f"{label:<11} {sparkline(values)}  {summary}")


def _slots(points, start, minutes):
    """The points at their minute (a minute without a sample has none)."""
    slots = [None] * minutes
    for p in points:
        at = dt.datetime.fromisoformat(p["at"].replace("Z", "+00:00"))
        if at.tzinfo is None:
            at = at.replace(tzinfo=dt.UTC)
        i = int((at - start).total_seconds() // 60)
        if 0 <= i < minutes:
            slots[i] = p
    return slots


def _iso(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


COMMANDS = [metrics]
