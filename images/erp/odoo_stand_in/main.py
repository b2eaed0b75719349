"""What runs: `odoo neutralize`, `odoo shell` or the server, and the official image's
entrypoint.sh in front of them."""

import os

from odoo_stand_in.neutralize import neutralize
from odoo_stand_in.shell import shell
from odoo_stand_in.web import serve


def main(argv, env_defaults):
    if argv and argv[0] == "neutralize":
        return neutralize(argv[1:], env_defaults)
    if argv and argv[0] == "shell":
        return shell(argv[1:], env_defaults)
    return serve(argv, env_defaults)


def entrypoint(argv):
    """The official image's entrypoint.sh."""
    if argv and argv[0] in ("odoo", "--"):
        argv = argv[1:]
    elif argv and not argv[0].startswith("-"):
        os.execvp(argv[0], argv)
    env = os.environ
    password = env.get("PASSWORD")
    if env.get("PASSWORD_FILE"):
        with open(env["PASSWORD_FILE"], encoding="utf-8") as f:
            password = f.read().strip()
    defaults = {
        "db_host": env.get("HOST") or env.get("DB_PORT_5432_TCP_ADDR") or "db",
        "db_port": env.get("PORT") or env.get("DB_PORT_5432_TCP_PORT") or "5432",
        "db_user": env.get("USER") or env.get("DB_ENV_POSTGRES_USER")
        or env.get("POSTGRES_USER") or "odoo",
        "db_password": password or env.get("DB_ENV_POSTGRES_PASSWORD")
        or env.get("POSTGRES_PASSWORD") or "odoo",
    }
    return main(argv, defaults)


def run(argv):
    """The launcher's: as /entrypoint.sh, the entrypoint; else the `odoo` command."""
    if os.path.basename(argv[0]) == "entrypoint.sh":
        return entrypoint(argv[1:])
    return main(argv[1:], {})
