"""What the stand-in has of Odoo's `env`, for `odoo shell` and for tests: a cursor on
one transaction, models as their tables (counted), the administrator as the user,
and an `odoo` module holding them."""

import types

from psycopg2 import sql

from odoo_stand_in.config import VERSION

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
