"""`odoo shell`: a script on standard input, or a Python console, with `env` on the
database (no ORM: a cursor, and models as their tables)."""

import code
import logging
import os
import sys
import types

import psycopg2
from psycopg2 import sql

from odoo_stand_in.config import (
    LOG_FORMAT,
    VERSION,
    checked_settings,
    fail,
    parse_args,
    report_configuration,
)
from odoo_stand_in.database import Database

SUPERUSER_ID = 1


class Cursor:
    """What scripts use of Odoo's `env.cr`, on a psycopg2 connection: one transaction,
    committed only by commit()."""

    def __init__(self, conn, dbname):
        self._conn, self._cr, self.dbname = conn, conn.cursor(), dbname

    def execute(self, query, params=None):
        self._cr.execute(query, params)

    def fetchone(self):
        return self._cr.fetchone()

    def fetchall(self):
        return self._cr.fetchall()

    def fetchmany(self, size=None):
        return self._cr.fetchmany(size) if size is not None else self._cr.fetchmany()

    def dictfetchall(self):
        names = [c.name for c in self._cr.description]
        return [dict(zip(names, row, strict=True)) for row in self._cr.fetchall()]

    @property
    def rowcount(self):
        return self._cr.rowcount

    def commit(self):
        self._conn.commit()

    def rollback(self):
        self._conn.rollback()

    def _query(self, query, params=None):
        """A query of the stand-in's own, on another cursor of the same transaction:
        the script's pending results stay."""
        with self._conn.cursor() as cr:
            cr.execute(query, params)
            return cr.fetchall()


class Model:
    """An Odoo model as far as the stand-in goes: its table, counted."""

    def __init__(self, env, name):
        self.env, self._name, self._table = env, name, name.replace(".", "_")

    def search_count(self, domain, limit=None):
        if domain:
            raise NotImplementedError(f"the Odoo stand-in supports only [] as the domain of"
                                      f" search_count, not {domain!r}")
        query = sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} LIMIT %s) AS records").format(
            sql.Identifier(self._table))
        return self.env.cr._query(query, (limit,))[0][0]

    def __repr__(self):
        return f"{self._name}()"


class User:
    _name = "res.users"

    def __init__(self, env, id, login, name):
        self.env, self.id, self.login, self.name = env, id, login, name

    def __repr__(self):
        return f"res.users({self.id},)"


class Environment:
    """Odoo's `env` as far as the stand-in goes: env.cr, env.uid, env.context,
    env.user, env['a.b'] (a model whose table a_b exists, else KeyError)."""

    def __init__(self, cr, uid, context):
        self.cr, self.uid, self.context, self._user = cr, uid, context, None

    def __getitem__(self, model_name):
        table = model_name.replace(".", "_")
        if not self.cr._query("SELECT to_regclass(%s) IS NOT NULL", (table,))[0][0]:
            raise KeyError(model_name)
        return Model(self, model_name)

    def __contains__(self, model_name):
        try:
            self[model_name]
        except KeyError:
            return False
        return True

    @property
    def user(self):
        """The administrator (base.user_admin), else the first user."""
        if self._user is None:
            rows = self.cr._query(
                "SELECT u.id, u.login, p.name FROM res_users u LEFT JOIN res_partner p"
                " ON p.id = u.partner_id ORDER BY u.id = (SELECT res_id FROM ir_model_data"
                " WHERE module = 'base' AND name = 'user_admin' LIMIT 1) DESC NULLS LAST,"
                " u.id LIMIT 1")
            self._user = User(self, *rows[0]) if rows else None
        return self._user


def odoo_module():
    """What `odoo` (and `openerp`) hold in the stand-in's shell."""
    odoo = types.ModuleType("odoo", "The Berth stand-in's: no ORM (see `env`).")
    odoo.SUPERUSER_ID = SUPERUSER_ID
    odoo.api = types.SimpleNamespace(Environment=Environment)
    odoo.release = types.SimpleNamespace(version=VERSION)
    return odoo


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
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=LOG_FORMAT)
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
    db = Database(s)
    db.wait()
    try:
        conn = db.connect()
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
