"""`odoo shell`: a script on standard input, or a Python console, with `env` on the
database (no ORM: a cursor, and models as their tables)."""

import code
import os
import sys

import psycopg2

from odoo_stand_in.config import (
    checked_settings,
    fail,
    parse_args,
    report_configuration,
    start_logging,
)
from odoo_stand_in.database import Database
from odoo_stand_in.env import SUPERUSER_ID, Cursor, Environment, odoo_module


def console(local_vars):
    """Odoo's Shell.console: the script on standard input, or a Python console."""
    if not os.isatty(sys.stdin.fileno()):
        local_vars["__name__"] = "__main__"
        exec(sys.stdin.read(), local_vars)
        return
    if "env" not in local_vars:
        print("No environment set, use `odoo shell -d dbname` to get one.")
    for name in sorted(local_vars):
        print(f"{name}: {local_vars[name]}")
    interactive = code.InteractiveConsole(local_vars)
    try:
        import readline
        import rlcompleter
    except ImportError:
        print("readline or rlcompleter not available, autocomplete disabled.")
    else:
        readline.set_completer(rlcompleter.Completer(local_vars).complete)
        readline.parse_and_bind("tab: complete")
    interactive.interact()


def shell(argv, env_defaults):
    """`odoo shell`: Odoo's options plus --shell-interface (only `python` here); logs
    on stderr, stdout is the script's."""
    start_logging(sys.stderr)
    args, unknown = parse_args(argv)
    s = checked_settings(args, env_defaults)
    if not s["db_name_set"]:
        s["db_name"] = None
    report_configuration(s, unknown)
    odoo = odoo_module()
    local_vars = {"openerp": odoo, "odoo": odoo}
    if not s["db_name"]:
        console(local_vars)
        return 0
    try:
        conn = Database(s).open()
    except psycopg2.Error as exc:
        fail(f"cannot open database {s['db_name']}: {str(exc).strip()}")
    try:  # an exception or SystemExit leaves with the transaction rolled back
        env = Environment(Cursor(conn, s["db_name"]), SUPERUSER_ID, {})
        local_vars.update(env=env, self=env.user)
        console(local_vars)
        env.cr.rollback()
    finally:
        conn.close()
    return 0
