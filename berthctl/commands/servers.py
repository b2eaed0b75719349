"""`berthctl servers`."""

import click

from berthctl.output import emit
from berthctl.pages import all_pages


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


COMMANDS = [servers]
