"""`berthctl mails`: what a non-production environment's ERP sent, caught by its
server's agent and never sent on (the mail catcher)."""

import json
import re

import click

from berthctl.commands import ID
from berthctl.output import echo, emit

COLUMNS = [("ID", "id"), ("RECEIVED", "received_at"), ("TO", "to"), ("SUBJECT", "subject"),
           ("ATTACHMENTS", lambda m: len(m["attachments"]))]
MAIL_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")  # the agent's: unix ms, a dash, hex


@click.group()
def mails():
    """Mails an environment's ERP sent, caught and never sent on."""


@mails.command("list")
@click.argument("env_id", type=ID)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 500))
@click.pass_obj
def mails_list(state, env_id, limit):
    """The newest caught mails, newest first."""
    answer = state.client.get(f"/environments/{env_id}/mails", limit=limit)
    emit(state, answer, COLUMNS, rows=answer["mails"])


@mails.command("show")
@click.argument("env_id", type=ID)
@click.argument("mail_id")
@click.option("--html", "as_html", is_flag=True, help="Print the HTML part instead of the "
                                                      "headers and text.")
@click.pass_obj
def mails_show(state, env_id, mail_id, as_html):
    """One mail: its headers and text part (or its HTML part, with --html)."""
    # It goes into the request's path: `../x` or `a?b` would ask for something else.
    if not MAIL_ID.fullmatch(mail_id):
        raise click.BadParameter(f"{mail_id!r} is not a mail id.", param_hint="MAIL_ID")
    mail = state.client.get(f"/environments/{env_id}/mails/{mail_id}")
    if state.output == "json":
        click.echo(json.dumps(mail, indent=2))
        return
    if as_html:
        if not mail["html"]:
            click.echo("(no HTML part)", err=True)  # stdout stays empty for scripts
        for line in mail["html"].splitlines():
            echo(line, tabs=True)  # the markup as sent, its control characters escaped
        return
    for header in mail["headers"]:
        echo(f"{header['name']}: {header['value']}")
    click.echo("")
    for line in mail["text"].splitlines():
        echo(line, tabs=True)


COMMANDS = [mails]
