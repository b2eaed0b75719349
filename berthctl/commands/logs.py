"""`berthctl logs`: an environment's runtime logs, followed with -f."""

import json
import time

import click

from berthctl.commands import ID
from berthctl.errors import ApiError
from berthctl.output import echo
from berthctl.tasks import overlap

# Runtime logs allow 6 calls a minute per environment: one every 10 s keeps
# `logs -f` inside it, with room for a `logs` in another terminal.
FOLLOW_INTERVAL = 10.0
FOLLOW_LINES = 1000  # the most one call returns: the widest overlap between two reads


@click.command()
@click.argument("env_id", type=ID)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("--source", default="erp", show_default=True,
              type=click.Choice(["erp", "postgres"]), help="Which container.")
@click.option("-n", "--lines", default=200, show_default=True, type=click.IntRange(1, 1000))
@click.option("--interval", default=FOLLOW_INTERVAL, show_default=True,
              type=click.FloatRange(1.0), help="Seconds between reads with -f.")
@click.pass_obj
def logs(state, env_id, follow, source, lines, interval):
    """An environment's runtime logs (what its container printed), read live."""
    client = state.client
    path = f"/environments/{env_id}/runtime-logs"
    if not follow:
        first = client.get(path, source=source, lines=lines)
        if state.output == "json":
            click.echo(json.dumps(first, indent=2))
        else:
            _print(state, first, _split(first["log"]))
        return
    try:
        # Following, each read is the widest, so that the next one overlaps it.
        first = client.get(path, source=source, lines=FOLLOW_LINES)
        seen = _split(first["log"])
        _print(state, first, seen[-lines:])
        while True:
            time.sleep(interval)
            try:
                answer = client.get(path, source=source, lines=FOLLOW_LINES)
            except ApiError as err:
                if err.status != 429:  # per-environment limit shared with others: wait
                    raise
                time.sleep(err.retry_after or interval)
                continue
            current = _split(answer["log"])
            fresh = current[overlap(seen, current):]
            _print(state, answer, fresh)
            seen = current
    except KeyboardInterrupt:  # the way to stop following: not an error
        click.echo("", err=True)


def _split(text):
    return text.split("\n") if text else []


def _print(state, answer, lines):
    if state.output == "json":  # one JSON object a line, each a read's new lines
        if lines:
            click.echo(json.dumps({**answer, "log": "\n".join(lines), "lines": len(lines)}))
        return
    for line in lines:
        echo(line, tabs=True)


COMMANDS = [logs]
