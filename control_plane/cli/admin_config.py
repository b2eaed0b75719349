"""`berth admin config ...`: an environment's configuration for operators (show,
set), with the same checks as /api/v1. Secret values are read from standard
input, one line each, never from the command line."""

import json
import sys

import click

from control_plane.agent_link import current_berth
from control_plane.cli.admin import UUID_T, _iso, admin, command, operator


def _shown(config):
    return {**config, "environment_id": str(config["environment_id"]),
            "updated_at": _iso(config["updated_at"])}


def _pairs(items, what):
    """KEY=VALUE options; a value that reads as JSON (a number, true, a list) is
    taken as such, anything else as a string."""
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=what)
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out


@admin.group()
def config():
    """Variables, ERP options and PostgreSQL settings of environments."""


@command(config, "show")
@click.option("--environment", "env_id", type=UUID_T, required=True)
def config_show(env_id):
    """The environment's configuration; secret values show as null."""
    from control_plane.services.deploys import config_change

    return _shown(config_change.read(operator(), env_id))


@command(config, "set")
@click.option("--environment", "env_id", type=UUID_T, required=True)
@click.option("--var", "variables", multiple=True, metavar="NAME=VALUE",
              help="Set a variable (not secret)")
@click.option("--secret-var", "secret_names", multiple=True, metavar="NAME",
              help="Set a secret variable; its value is the next line of standard input")
@click.option("--unset-var", multiple=True, metavar="NAME")
@click.option("--erp-option", "erp_options", multiple=True, metavar="KEY=VALUE")
@click.option("--unset-erp-option", multiple=True, metavar="KEY")
@click.option("--pg-setting", "pg_settings", multiple=True, metavar="KEY=VALUE")
@click.option("--unset-pg-setting", multiple=True, metavar="KEY")
def config_set(env_id, variables, secret_names, unset_var, erp_options, unset_erp_option,
               pg_settings, unset_pg_setting):
    """Change only what is named; an environment with containers is redeployed
    (trigger config_update), and the new deployment is printed with it."""

    from control_plane.services.deploys import config_change

    changes = {"variables": {}, "erp_options": {}, "postgres_settings": {}}
    for item in variables:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--var")
        changes["variables"][name] = {"value": value, "secret": False}
    for name in secret_names:
        line = sys.stdin.readline()
        if not line:
            raise click.BadParameter(f"no value on standard input for {name}",
                                     param_hint="--secret-var")
        changes["variables"][name] = {"value": line.rstrip("\r\n"), "secret": True}
    changes["variables"].update(dict.fromkeys(unset_var))
    changes["erp_options"] = {**_pairs(erp_options, "--erp-option"),
                              **dict.fromkeys(unset_erp_option)}
    changes["postgres_settings"] = {**_pairs(pg_settings, "--pg-setting"),
                                    **dict.fromkeys(unset_pg_setting)}
    shown, d = config_change.change(operator(), env_id, changes,
                                 berth=current_berth())
    return {"configuration": _shown(shown),
            "deployment": d and {"id": str(d.id), "version": d.version, "trigger": d.trigger,
                                 "status": d.status}}
