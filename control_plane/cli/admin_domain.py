"""`berth admin domain ...`: an environment's custom domains for operators
(list, add, verify, remove), with the same checks as /api/v1."""

import click

from control_plane.agent_link import current_berth
from control_plane.cli.admin import UUID_T, _iso, admin, command


def _environment(env_id):
    from control_plane.services.accounts import actors
    from control_plane.services.environment_settings import access

    return access.environment(actors.OPERATOR, env_id)


def _domain(d, env):
    from control_plane.services.environment_settings import domains

    out = domains.describe(d, env, current_berth().settings["APPS_DOMAIN"])
    return {**out, "environment_id": str(env.id),
            **{name: _iso(out[name]) for name in ("created_at", "verified_at", "checked_at")}}


@admin.group()
def domain():
    """Custom domains of environments."""


@command(domain, "list")
@click.option("--environment", "env_id", type=UUID_T, required=True)
def domain_list(env_id):
    """The environment's custom domains, oldest first."""
    from control_plane.services.environment_settings import domains

    env = _environment(env_id)
    return {"items": [_domain(d, env) for d in domains.list_of(env)]}


@command(domain, "add")
@click.option("--environment", "env_id", type=UUID_T, required=True)
@click.argument("name")
def domain_add(env_id, name):
    """Add NAME (pending until verified); prints the DNS records that prove it."""
    from control_plane.services.environment_settings import domains

    env = _environment(env_id)
    return _domain(domains.add(env, name, current_berth().settings["APPS_DOMAIN"]), env)


@command(domain, "verify")
@click.option("--environment", "env_id", type=UUID_T, required=True)
@click.argument("name")
def domain_verify(env_id, name):
    """Look up NAME's TXT record or CNAME now; verified once either is seen."""
    from control_plane.services.environment_settings import domains

    env = _environment(env_id)
    return _domain(domains.verify(env, name, current_berth()), env)


@command(domain, "remove")
@click.option("--environment", "env_id", type=UUID_T, required=True)
@click.argument("name")
def domain_remove(env_id, name):
    """Remove NAME from the environment; the name is free again."""
    from control_plane.services.environment_settings import domains

    env = _environment(env_id)
    domains.remove(env, name, current_berth())
    return {"removed": name, "environment_id": str(env.id)}
