"""The command groups of berthctl, one module each."""

import click


class _Id(click.ParamType):
    """An id the command puts into a request's path: a UUID, or a usage error before
    any request (`../projects` would name another resource), given on as text."""

    name = "uuid"

    def convert(self, value, param, ctx):
        return str(click.UUID.convert(value, param, ctx))


ID = _Id()
