"""`berthctl projects`."""

import click

from berthctl.output import emit
from berthctl.pages import all_pages


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


COMMANDS = [projects]
