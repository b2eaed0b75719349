"""The database as Odoo keeps it, for the tables the platform touches: created when
missing, modules installed and updated, and what /berth/info and mail read of it."""

import hashlib
import logging
import mimetypes
import os
import time
import uuid

import psycopg2
from psycopg2 import sql

from odoo_stand_in.addons import (
    adapt_version,
    find_addons,
    in_order,
    migrate,
    with_dependencies,
)
from odoo_stand_in.config import DB_WAIT_SECONDS, VERSION, fail

log = logging.getLogger("odoo.service.server")

AUTOVACUUM = "Base: Auto-vacuum internal data"  # the one scheduled action left on
# The rest of the tables the stand-in models, in Odoo's shape (the columns a copy's
# safety and anonymisation touch): created when missing.
TABLES = {
    "ir_model_data": "id serial PRIMARY KEY, module varchar NOT NULL, name varchar NOT NULL,"
                     " model varchar NOT NULL, res_id integer",
    # A stored attachment's file: <data_dir>/filestore/<db>/<store_fname>, named by its
    # SHA-1 (`checksum`) as Odoo names it.
    "ir_attachment": "id serial PRIMARY KEY, name varchar NOT NULL, store_fname varchar,"
                     " checksum varchar(40), file_size integer, mimetype varchar",
    "res_partner": "id serial PRIMARY KEY, name varchar, email varchar, phone varchar,"
                   " mobile varchar, street varchar, street2 varchar, zip varchar,"
                   " city varchar, vat varchar, comment text",
    "res_users": "id serial PRIMARY KEY, login varchar NOT NULL UNIQUE, password varchar,"
                 " partner_id integer NOT NULL, active boolean DEFAULT true, signature text",
    "res_users_apikeys": "id serial PRIMARY KEY, name varchar NOT NULL,"
                         " user_id integer NOT NULL, key varchar NOT NULL",
    "mail_message": "id serial PRIMARY KEY, subject varchar, body text, email_from varchar,"
                    " record_name varchar, author_id integer",
    "fetchmail_server": "id serial PRIMARY KEY, name varchar NOT NULL, server varchar,"
                        " \"user\" varchar, password varchar, active boolean DEFAULT true",
    "payment_provider": "id serial PRIMARY KEY, name varchar NOT NULL, code varchar,"
                        " state varchar NOT NULL DEFAULT 'disabled', secret_key varchar",
    "delivery_carrier": "id serial PRIMARY KEY, name varchar NOT NULL, delivery_type varchar,"
                        " prod_environment boolean DEFAULT false, api_password varchar",
}


def create_tables(cr):
    """The Odoo tables the stand-in models (a database from an older stand-in gets
    the ones it lacks)."""
    cr.execute("CREATE TABLE IF NOT EXISTS ir_config_parameter"
               " (key varchar PRIMARY KEY, value text NOT NULL)")
    cr.execute("CREATE TABLE IF NOT EXISTS ir_module_module (id serial PRIMARY KEY,"
               " name varchar UNIQUE NOT NULL, state varchar NOT NULL, latest_version varchar)")
    cr.execute("SELECT to_regclass('ir_model_data') IS NULL")
    new = cr.fetchone()[0]
    for table, columns in TABLES.items():
        cr.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
    if new:  # base's records: the administrator and their partner
        cr.execute("INSERT INTO res_partner (name, email) VALUES"
                   " ('Administrator', 'admin@example.com') RETURNING id")
        partner = cr.fetchone()[0]
        cr.execute("INSERT INTO res_users (login, partner_id) VALUES ('admin', %s)"
                   " RETURNING id", (partner,))
        cr.execute("INSERT INTO ir_model_data (module, name, model, res_id) VALUES"
                   " ('base', 'user_admin', 'res.users', %s)", (cr.fetchone()[0],))
    cr.execute("SELECT to_regclass('ir_cron') IS NULL")
    new_cron = cr.fetchone()[0]
    cr.execute("CREATE TABLE IF NOT EXISTS ir_cron (id serial PRIMARY KEY,"
               " name varchar NOT NULL, active boolean NOT NULL DEFAULT true)")
    if new_cron:
        cr.execute("INSERT INTO ir_cron (name) VALUES (%s), ('Mail: Email Queue Manager')",
                   (AUTOVACUUM,))
    # When each runs (Odoo's interval, next and last call) and the triggers that make one
    # run now (ir_cron_trigger, Odoo 16+).
    cr.execute("ALTER TABLE ir_cron ADD COLUMN IF NOT EXISTS interval_number integer"
               " NOT NULL DEFAULT 1, ADD COLUMN IF NOT EXISTS interval_type varchar NOT NULL"
               " DEFAULT 'hours', ADD COLUMN IF NOT EXISTS nextcall timestamp NOT NULL"
               " DEFAULT (now() at time zone 'UTC'),"
               " ADD COLUMN IF NOT EXISTS lastcall timestamp")
    cr.execute("UPDATE ir_cron SET interval_type = 'days' WHERE name = %s"
               " AND interval_type = 'hours' AND lastcall IS NULL", (AUTOVACUUM,))
    cr.execute("CREATE TABLE IF NOT EXISTS ir_cron_trigger (id serial PRIMARY KEY,"
               " cron_id integer NOT NULL, call_at timestamp NOT NULL)")
    cr.execute("INSERT INTO ir_model_data (module, name, model, res_id) SELECT 'base',"
               " 'autovacuum_job', 'ir.cron', id FROM ir_cron WHERE name = %s AND NOT EXISTS"
               " (SELECT 1 FROM ir_model_data WHERE name = 'autovacuum_job')", (AUTOVACUUM,))
    cr.execute("CREATE TABLE IF NOT EXISTS ir_mail_server (id serial PRIMARY KEY,"
               " name varchar NOT NULL, smtp_host varchar NOT NULL, smtp_port integer,"
               " active boolean NOT NULL DEFAULT true)")
    cr.execute("ALTER TABLE ir_mail_server ADD COLUMN IF NOT EXISTS smtp_user varchar,"
               " ADD COLUMN IF NOT EXISTS smtp_pass varchar,"
               " ADD COLUMN IF NOT EXISTS sequence integer DEFAULT 10,"
               " ADD COLUMN IF NOT EXISTS smtp_encryption varchar DEFAULT 'none'")


class Database:
    def __init__(self, s):
        self.s = s

    def connect(self, dbname=None, timeout=3):
        return psycopg2.connect(host=self.s["db_host"], port=self.s["db_port"],
                                user=self.s["db_user"], password=self.s["db_password"],
                                dbname=dbname or self.s["db_name"], connect_timeout=timeout,
                                application_name="odoo")

    def wait(self):
        deadline, error = time.monotonic() + DB_WAIT_SECONDS, None
        while time.monotonic() < deadline:
            try:
                self.connect("postgres").close()
                return
            except psycopg2.OperationalError as exc:
                error = exc
                time.sleep(1)
        fail(f"Database connection failure: {str(error).strip()}")

    def open(self):
        """A connection to the database, once PostgreSQL answers (psycopg2.Error when
        the database cannot be opened)."""
        self.wait()
        return self.connect()

    def ensure(self, init, update):
        """The database made or brought up to date: -i's modules (and what they depend
        on) installed, -u's updated, in loading order. Returns the modules loaded as
        Odoo tests them: those installed or updated, else (neither -i nor -u) every
        installed one."""
        name = self.s["db_name"]
        conn = self.connect("postgres")
        conn.autocommit = True
        try:
            with conn.cursor() as cr:
                cr.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if not cr.fetchone():
                    log.info("creating database %s", name)
                    try:
                        cr.execute(sql.SQL("CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE template0")
                                   .format(sql.Identifier(name)))
                    except psycopg2.errors.DuplicateDatabase:
                        pass
        finally:
            conn.close()
        addons = {a["name"]: a for a in find_addons(self.s["addons_path"]) if "error" not in a}
        unknown = sorted(set(init) - set(addons) - {"base"})
        if unknown:
            log.warning("invalid module names, ignored: %s", ", ".join(unknown))
            init = [m for m in init if m not in unknown]
        init = with_dependencies(init, addons)
        loaded = []
        conn = self.connect()
        with conn, conn.cursor() as cr:
            cr.execute("SELECT pg_advisory_xact_lock(8069)")
            create_tables(cr)
            cr.execute("INSERT INTO ir_config_parameter VALUES ('database.uuid', %s),"
                       " ('database.create_date', now()::text) ON CONFLICT DO NOTHING",
                       (str(uuid.uuid4()),))
            cr.execute("INSERT INTO ir_module_module (name, state, latest_version)"
                       " VALUES ('base', 'installed', %s) ON CONFLICT DO NOTHING", (VERSION,))
            for a in (addons[n] for n in in_order(addons)):
                version = adapt_version(a.get("version"))
                cr.execute("SELECT state, latest_version FROM ir_module_module WHERE name = %s",
                           (a["name"],))
                before = cr.fetchone()
                state = "installed" if a["name"] in init else "uninstalled"
                cr.execute("INSERT INTO ir_module_module (name, state, latest_version)"
                           " VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET state ="
                           " CASE WHEN EXCLUDED.state = 'installed' THEN 'installed'"
                           " ELSE ir_module_module.state END",
                           (a["name"], state, version))
                updating = before is not None and before[0] == "installed" and (
                    "all" in update or a["name"] in update)
                if updating:
                    migrate(cr, a, before[1], version)
                if a["name"] in init or updating:
                    cr.execute("UPDATE ir_module_module SET latest_version = %s"
                               " WHERE name = %s AND state = 'installed'", (version, a["name"]))
                if a["name"] in init or updating or (
                        not init and not update and before and before[0] == "installed"):
                    loaded.append(a["name"])
        conn.close()
        log.info("database %s ready (modules to install: %s, to update: %s)",
                 name, ",".join(sorted(init)) or "-", ",".join(update) or "-")
        return loaded

    def attach(self, name, data):
        """ir_attachment's _file_write: the file at <filestore>/<sha1[:2]>/<sha1> (kept
        when already there), then the row naming it."""
        checksum = hashlib.sha1(data).hexdigest()
        store_fname = f"{checksum[:2]}/{checksum}"
        path = os.path.join(self.s["data_dir"], "filestore", self.s["db_name"], store_fname)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".part", "wb") as f:
                f.write(data)
            os.replace(path + ".part", path)
        mimetype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        conn = self.connect(timeout=2)
        try:
            with conn, conn.cursor() as cr:
                cr.execute("INSERT INTO ir_attachment (name, store_fname, checksum, file_size,"
                           " mimetype) VALUES (%s, %s, %s, %s, %s) RETURNING id",
                           (name, store_fname, checksum, len(data), mimetype))
                return {"id": cr.fetchone()[0], "store_fname": store_fname,
                        "file_size": len(data)}
        finally:
            conn.close()

    def info(self):
        conn = self.connect(timeout=2)
        try:
            with conn.cursor() as cr:
                cr.execute("SELECT value FROM ir_config_parameter WHERE key = 'database.uuid'")
                db_uuid = cr.fetchone()[0]
                cr.execute("SELECT name, latest_version FROM ir_module_module"
                           " WHERE state = 'installed' ORDER BY name")
                modules = [{"name": n, "version": v} for n, v in cr.fetchall()]
                # What the stand-in has of Odoo's models and their fields: tables, columns.
                cr.execute("SELECT table_name, array_agg(column_name::text ORDER BY"
                           " ordinal_position) FROM information_schema.columns"
                           " WHERE table_schema = 'public' GROUP BY table_name")
                return db_uuid, modules, dict(cr.fetchall())
        finally:
            conn.close()

    def outgoing(self, msg, body):
        """Keep the message's copy in mail_message, as Odoo does before it sends, and
        choose the server as Odoo does: the first active ir_mail_server by sequence
        (then id), else the options' smtp_* (smtp_ssl meaning STARTTLS, as in Odoo).
        Returns (via, host, port, user, password, encryption)."""
        conn = self.connect(timeout=2)
        try:
            with conn, conn.cursor() as cr:
                cr.execute("INSERT INTO mail_message (subject, body, email_from)"
                           " VALUES (%s, %s, %s)", (msg["Subject"], body, msg["From"]))
                cr.execute("SELECT smtp_host, smtp_port, smtp_user, smtp_pass, smtp_encryption"
                           " FROM ir_mail_server WHERE active ORDER BY sequence, id LIMIT 1")
                row = cr.fetchone()
        finally:
            conn.close()
        if row:
            return ("ir_mail_server", row[0], row[1] or 25, row[2], row[3], row[4] or "none")
        s = self.s
        return ("config", s["smtp_server"], s["smtp_port"], s["smtp_user"], s["smtp_password"],
                "starttls" if s["smtp_ssl"] else "none")
