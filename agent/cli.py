"""`berth-agent`: the agent's command line."""

import click

from agent import __version__


@click.group()
@click.version_option(__version__, prog_name="berth-agent")
def cli():
    """Berth agent for a customer server."""


def main():
    cli()
