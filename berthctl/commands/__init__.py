"""The command groups of berthctl, one module each."""

import os
import sys

import click


class _Id(click.ParamType):
    """An id the command puts into a request's path: a UUID, or a usage error before
    any request (`../projects` would name another resource), given on as text."""

    name = "uuid"

    def convert(self, value, param, ctx):
        return str(click.UUID.convert(value, param, ctx))


ID = _Id()


def read_secret(what, env=None):
    """A secret from the environment variable `env`, else stdin (a hidden prompt on
    a terminal): never from argv, where shell history and `ps` would keep it."""
    value = os.environ.get(env) if env else None
    if not value:
        if sys.stdin.isatty():
            value = click.prompt(what, hide_input=True, err=True)
        else:
            value = sys.stdin.readline()
    value = value.strip()
    if not value:
        raise click.UsageError(f"No {what} on stdin" + (f" or in {env}." if env else "."))
    return value
