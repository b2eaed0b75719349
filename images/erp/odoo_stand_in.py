#!/usr/bin/python3
"""A stand-in for the official `odoo` image's server, for tests: the same config file,
environment, command line, volumes and port, a real PostgreSQL connection, and no ERP.

Run as /entrypoint.sh (the image's entry point) it follows the official entrypoint.sh:
HOST, PORT, USER, PASSWORD (or PASSWORD_FILE) give db_host, db_port, db_user and
db_password unless the config file sets them; a command of `odoo`, `--` or options
starts the server, any other command is run as is. Run as `odoo` it is the server:

  odoo [-c FILE] [--db_host H] [--db_port P] [-r USER] [-w PASSWORD] [-d DB]
       [--addons-path A,B] [-D DATA_DIR] [-p PORT] [--http-interface ADDR]
       [--proxy-mode] [-i MODULES] [-u MODULES] [--stop-after-init]
       [--smtp HOST] [--smtp-port P] [--smtp-user U] [--smtp-password PW] [--smtp-ssl]
  odoo neutralize [the same options] -d DB [--stdout]

`neutralize` is Odoo's (16+): the modules' data/neutralize.sql on the existing
database DB (outgoing mail servers off and a dummy one added, every scheduled action
off but the autovacuum, incoming mail servers off, payment providers and carriers
out of live mode, `database.is_neutralized` set); `--stdout` prints the SQL
instead. Exit 1, saying the database is not neutralized, when it cannot.

  odoo shell [the same options] [-d DB] [--shell-interface python]

`shell` is Odoo's: with standard input not a terminal, it runs that input as a Python
script (`exec(sys.stdin.read(), local_vars)`), else an interactive console
(`code.InteractiveConsole`, the one Odoo falls back to; other --shell-interface values
fall back to it too), with `env`, `self`, `odoo` and `openerp` among the variables;
it logs on stderr only, so stdout holds only what the script prints. An exception
ends it with the traceback and exit 1, `sys.exit(n)` or the console's `exit(n)` with
n, Ctrl-D with 0; the transaction is rolled back at the end unless the script called
`env.cr.commit()`. Without an ORM, `env` is a psycopg2 connection to DB in one
transaction: `env.cr` (execute(sql, params=None), fetchone, fetchall, fetchmany,
dictfetchall, rowcount, commit, rollback), `env['a.b']` for the table a_b (KeyError when
there is none) with only `search_count([])`, other domains raising
NotImplementedError; `self` and `env.user` the administrator (base.user_admin: `id`,
`login`, `name`; Odoo's are the superuser, base.user_root, login __system__, which the
stand-in lacks); `odoo` holds SUPERUSER_ID, release.version and api.Environment.
DB must exist (the shell creates nothing: exit 1 otherwise); without a database (-d or
db_name), no `env` or `self`, as in Odoo.

The config file (-c, else $ODOO_RC) must be readable and hold [options]; otherwise it
exits 1 with the reason. It waits up to 30 s for PostgreSQL, creates the database
(db_name, default "odoo") when missing with Odoo's tables in the shape the
platform touches (ir_config_parameter holding database.uuid, ir_module_module,
ir_model_data, ir_attachment, ir_cron holding the autovacuum and the mail queue,
ir_mail_server, fetchmail_server, payment_provider, delivery_carrier, res_partner
and res_users holding the administrator, res_users_apikeys, mail_message),
installs (-i) and updates (-u, `all` for every installed module) the add-ons: an update of a module whose version rose runs its migration
scripts (migrations/<version>/{pre,post,end}-*.py, `migrate(cr, version)`) in one
transaction with the version change, and exits 1 with the traceback if one raises;
versions are kept as Odoo keeps them ('1.2' is '17.0.1.2'), then creates the filestore under data_dir, then
serves on 8069:
  GET /web/health    200 {"status": "pass"} when the database answers, else 503
  GET /              a small page
  GET /berth/addons  the add-ons in addons_path: directories with a __manifest__.py
  GET /berth/info    settings in effect, database uuid, installed modules
  GET /websocket     a websocket upgrade: one text frame naming the port that
                     answered, then a close. Like Odoo, with `workers` above 0 it is
                     served on gevent_port (8072), else on the HTTP port.
  POST /berth/send-mail  {"to": [..], "subject", "body", "html"?, "attachments"?:
                     [{"name", "content_base64"}]}: a MIME message sent as Odoo sends
                     mail: through the first active ir_mail_server by sequence, else
                     the options' smtp_server/smtp_port/smtp_user/smtp_password/smtp_ssl
                     (10 s timeout), a copy kept in mail_message. 200 {"sent": true,
                     "server": "host:port", "via": "ir_mail_server"|"config"}, 502
                     {"sent": false, "error"} when it could not be sent.
"""

import argparse
import ast
import base64
import code
import configparser
import hashlib
import html
import http.server
import importlib.util
import json
import logging
import mimetypes
import os
import signal
import smtplib
import sys
import threading
import time
import types
import uuid
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

import psycopg2
from psycopg2 import sql

VERSION = os.environ.get("ODOO_VERSION", "17.0")
DB_WAIT_SECONDS = 30
DEFAULTS = {"db_host": None, "db_port": "5432", "db_user": None, "db_password": None,
            "db_name": "odoo", "addons_path": "", "data_dir": "/var/lib/odoo",
            "http_port": "8069", "http_interface": "", "proxy_mode": "False",
            "workers": "0", "gevent_port": "8072", "smtp_server": "localhost",
            "smtp_port": "25", "smtp_user": None, "smtp_password": None, "smtp_ssl": "False"}
SMTP_TIMEOUT = 10  # seconds: a mail server that does not answer must not hang the request
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455
LOG_FORMAT = "%(asctime)s %(process)d %(levelname)s ? %(name)s: %(message)s"
log = logging.getLogger("odoo.service.server")


class ConfigError(Exception):
    pass


def fail(message):
    print(f"odoo: error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def read_config(path):
    parser = configparser.RawConfigParser()
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {path}: {exc.strerror}") from exc
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot parse the configuration file {path}: {exc}") from exc
    if not parser.has_section("options"):
        raise ConfigError(f"the configuration file {path} has no [options] section")
    return dict(parser.items("options"))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="odoo", add_help=True)
    p.add_argument("-c", "--config")
    p.add_argument("--db_host")
    p.add_argument("--db_port")
    p.add_argument("-r", "--db_user")
    p.add_argument("-w", "--db_password")
    p.add_argument("-d", "--database", dest="db_name")
    p.add_argument("--addons-path", dest="addons_path")
    p.add_argument("-D", "--data-dir", dest="data_dir")
    p.add_argument("-p", "--http-port", dest="http_port")
    p.add_argument("--http-interface", dest="http_interface")
    p.add_argument("--proxy-mode", dest="proxy_mode", action="store_const", const="True")
    p.add_argument("-i", "--init", default="")
    p.add_argument("-u", "--update", default="")
    p.add_argument("--stop-after-init", action="store_true")
    p.add_argument("--smtp", dest="smtp_server")
    p.add_argument("--smtp-port", dest="smtp_port")
    p.add_argument("--smtp-user", dest="smtp_user")
    p.add_argument("--smtp-password", dest="smtp_password")
    p.add_argument("--smtp-ssl", dest="smtp_ssl", action="store_const", const="True")
    p.add_argument("--shell-interface", dest="shell_interface")
    return p.parse_known_args(argv)


def settings(args, env_defaults):
    """Command line, then config file, then the entrypoint's environment, then defaults."""
    path = args.config or os.environ.get("ODOO_RC")
    config = read_config(path) if path else {}
    for old, new in (("xmlrpc_port", "http_port"), ("xmlrpc_interface", "http_interface")):
        if old in config:  # the names before Odoo 11
            config.setdefault(new, config[old])
    merged = {}
    for key, default in DEFAULTS.items():
        value = getattr(args, key, None)
        if value is None:
            value = config.get(key, env_defaults.get(key, default))
        merged[key] = None if value is None or value.strip() in ("False", "None") else value.strip()
    try:
        merged["db_port"] = int(merged["db_port"] or 5432)
        merged["http_port"] = int(merged["http_port"] or 8069)
        merged["gevent_port"] = int(merged["gevent_port"] or 8072)
        merged["workers"] = int(merged["workers"] or 0)
        merged["smtp_port"] = int(merged["smtp_port"] or 25)
    except ValueError as exc:
        raise ConfigError(f"{path or 'options'}: a port is not a number ({exc})") from exc
    given = args.db_name or config.get("db_name") or env_defaults.get("db_name") or ""
    merged["db_name_set"] = given.strip() not in ("", "False", "None")  # Odoo's default: none
    merged["db_name"] = (merged["db_name"] or "odoo").split(",")[0].strip()
    merged["proxy_mode"] = (merged["proxy_mode"] or "").lower() in ("true", "1", "yes")
    merged["smtp_ssl"] = (merged["smtp_ssl"] or "").lower() in ("true", "1", "yes")
    merged["addons_path"] = [p.strip() for p in (merged["addons_path"] or "").split(",") if p.strip()]
    merged["data_dir"] = merged["data_dir"] or DEFAULTS["data_dir"]
    merged["config_file"] = path
    return merged


def checked_settings(args, env_defaults):
    """`settings`, or exit 1 with the reason (every command's start)."""
    try:
        return settings(args, env_defaults)
    except ConfigError as exc:
        fail(str(exc))


def find_addons(addons_path):
    """Add-ons as Odoo finds them: the first directory of a name in addons_path that
    holds a __manifest__.py (read with ast.literal_eval, as Odoo does)."""
    found = {}
    for root in addons_path:
        try:
            names = sorted(os.listdir(root))
        except OSError as exc:
            log.warning("addons path %s: %s", root, exc.strerror)
            continue
        for name in names:
            manifest = os.path.join(root, name, "__manifest__.py")
            if name in found or not os.path.isfile(manifest):
                continue
            entry = {"name": name, "path": os.path.join(root, name)}
            try:
                with open(manifest, encoding="utf-8") as f:
                    data = ast.literal_eval(f.read())
                entry.update(title=data.get("name"), version=data.get("version"),
                             installable=data.get("installable", True))
            except (OSError, ValueError, SyntaxError, AttributeError) as exc:
                entry["error"] = f"unreadable manifest: {exc}"
            found[name] = entry
    return list(found.values())


AUTOVACUUM = "Base: Auto-vacuum internal data"  # the one scheduled action left on
# The installed modules' data/neutralize.sql (base, mail, payment, delivery) as Odoo 17
# ships them, for the tables the stand-in models: the autovacuum is found by its
# external id, as Odoo finds it.
NEUTRALIZE_SQL = """UPDATE ir_cron SET active = false WHERE id NOT IN (SELECT res_id
    FROM ir_model_data WHERE model = 'ir.cron' AND name = 'autovacuum_job');
UPDATE ir_mail_server SET active = false;
INSERT INTO ir_mail_server (name, smtp_host, smtp_port, smtp_encryption, active)
    VALUES ('neutralization - disable emails', 'invalid', 1025, 'none', true);
UPDATE fetchmail_server SET active = false;
UPDATE payment_provider SET state = 'disabled' WHERE state NOT IN ('test', 'disabled');
UPDATE delivery_carrier SET prod_environment = false;
INSERT INTO ir_config_parameter (key, value) VALUES ('database.is_neutralized', true)
    ON CONFLICT (key) DO UPDATE SET value = true;
"""
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


def adapt_version(version):
    """Odoo's adapt_version: a manifest version without the series is prefixed with it
    ('1.2' -> '17.0.1.2'), which is what ir_module_module.latest_version holds."""
    if not version:
        return version
    serie = ".".join(VERSION.split(".")[:2])
    return version if version == serie or version.startswith(serie + ".") else f"{serie}.{version}"


def _key(version):
    return tuple(int(p) if p.isdigit() else 0 for p in (version or "0").split("."))


def migrate(cr, addon, installed, version):
    """Odoo's migration scripts of an updated module: for each folder
    <module>/migrations/<version> above the installed version and up to the new
    one (in version order), its pre-*.py, then its post-*.py, then end-*.py, each
    file's `migrate(cr, installed_version)`, in the caller's transaction: one that
    raises fails the whole update and nothing of it stays."""
    base = os.path.join(addon["path"], "migrations")
    try:
        folders = [f for f in os.listdir(base) if os.path.isdir(os.path.join(base, f))]
    except OSError:
        folders = []
    steps = sorted((f for f in folders
                    if _key(installed) < _key(adapt_version(f)) <= _key(version)),
                   key=lambda f: _key(adapt_version(f)))
    mlog = logging.getLogger("odoo.modules.migration")
    for stage in ("pre", "post", "end"):
        for folder in steps:
            for name in sorted(os.listdir(os.path.join(base, folder))):
                if not (name.startswith(stage + "-") and name.endswith(".py")):
                    continue
                path = os.path.join(base, folder, name)
                mlog.info("module %s: Running migration [%s>] %s", addon["name"], folder,
                          name[:-3])
                spec = importlib.util.spec_from_file_location(f"migration_{name[:-3]}", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                module.migrate(cr, installed)
    if steps or installed != version:
        log.info("module %s: updated from %s to %s", addon["name"], installed, version)


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

    def ensure(self, init, update):
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
        conn = self.connect()
        with conn, conn.cursor() as cr:
            cr.execute("SELECT pg_advisory_xact_lock(8069)")
            create_tables(cr)
            cr.execute("INSERT INTO ir_config_parameter VALUES ('database.uuid', %s),"
                       " ('database.create_date', now()::text) ON CONFLICT DO NOTHING",
                       (str(uuid.uuid4()),))
            cr.execute("INSERT INTO ir_module_module (name, state, latest_version)"
                       " VALUES ('base', 'installed', %s) ON CONFLICT DO NOTHING", (VERSION,))
            for a in addons.values():
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
        conn.close()
        log.info("database %s ready (modules to install: %s, to update: %s)",
                 name, ",".join(init) or "-", ",".join(update) or "-")

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


def build_mail(s, request):
    """The MIME message of a /berth/send-mail request: text, an HTML alternative,
    attachments. ValueError, KeyError or TypeError when the request is not one."""
    to, subject, body = (request.get(k) for k in ("to", "subject", "body"))
    if not (isinstance(to, list) and to and all(isinstance(a, str) and a for a in to)
            and isinstance(subject, str) and isinstance(body, str)):
        raise ValueError('needs "to" (a list of addresses), "subject" and "body"')
    domain = f"{s['db_name']}.example"
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = f"odoo@{domain}", ", ".join(to), subject
    msg["Date"], msg["Message-Id"] = formatdate(localtime=True), make_msgid(domain=domain)
    msg.set_content(body)
    if request.get("html"):
        msg.add_alternative(request["html"], subtype="html")
    for a in request.get("attachments") or ():
        data = base64.b64decode(a["content_base64"], validate=True)
        mimetype = mimetypes.guess_type(a["name"])[0] or "application/octet-stream"
        maintype, _, subtype = mimetype.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=a["name"])
    return msg


def send_mail(msg, host, port, user, password, encryption):
    """smtplib as Odoo uses it: SSL or STARTTLS as the server asks (certificates not
    verified, as Odoo's default), a login when a user is set. OSError (smtplib's
    errors among them) when the mail could not be handed over."""
    smtp_class = smtplib.SMTP_SSL if encryption == "ssl" else smtplib.SMTP
    with smtp_class(host, port, timeout=SMTP_TIMEOUT) as smtp:
        if encryption == "starttls":
            smtp.starttls()
        if user:
            smtp.login(user, password or "")
        smtp.send_message(msg)


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = f"odoo-stand-in/{VERSION}"
    protocol_version = "HTTP/1.1"  # as Odoo's server: keep-alive, websocket upgrades
    # Headers and body in one write, sent at once: unbuffered writes of each part
    # would meet delayed ACKs on kept-alive connections (40 ms a response).
    wbufsize, disable_nagle_algorithm = 64 * 1024, True
    s = db = None  # set by serve()

    def client(self):
        forwarded = self.headers.get("X-Forwarded-For") if self.s["proxy_mode"] else None
        return forwarded.split(",")[0].strip() if forwarded else self.client_address[0]

    def send(self, status, body, content_type="application/json"):
        data = (json.dumps(body) if content_type == "application/json" else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def websocket(self):
        """The upgrade, one text frame, a close (RFC 6455, server side)."""
        key = self.headers.get("Sec-WebSocket-Key", "")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not key:
            return self.send(400, {"error": "not a websocket upgrade"})
        longpolling_port = self.s["workers"] > 0
        if longpolling_port != (self.server.server_address[1] == self.s["gevent_port"]):
            return self.send(400, {"error": "websocket is served on the other port"})
        accept = base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.end_headers()
        text = json.dumps({"port": self.server.server_address[1]}).encode()
        self.wfile.write(bytes([0x81, len(text)]) + text + bytes([0x88, 0]))
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/websocket":
            self.websocket()
        elif path == "/web/health":
            try:
                conn = self.db.connect(timeout=2)
                try:
                    with conn.cursor() as cr:
                        cr.execute("SELECT 1")
                finally:
                    conn.close()
                self.send(200, {"status": "pass"})
            except psycopg2.Error as exc:
                log.warning("health check: database %s unreachable: %s", self.s["db_name"],
                            str(exc).strip())
                self.send(503, {"status": "fail", "error": str(exc).strip()})
        elif path == "/":
            self.send(200, f"<!DOCTYPE html><html><head><title>Odoo</title></head><body>"
                           f"<h1>Odoo {html.escape(VERSION)}</h1><p>Berth test stand-in, database "
                           f"{html.escape(self.s['db_name'])}.</p></body></html>", "text/html")
        elif path == "/berth/addons":
            self.send(200, {"addons_path": self.s["addons_path"],
                            "addons": find_addons(self.s["addons_path"])})
        elif path == "/berth/info":
            try:
                db_uuid, modules, tables = self.db.info()
            except psycopg2.Error:
                db_uuid = modules = tables = None
            scheme = "http"
            host = self.headers.get("Host")
            if self.s["proxy_mode"]:
                scheme = self.headers.get("X-Forwarded-Proto", scheme)
                host = self.headers.get("X-Forwarded-Host", host)
            keys = ("db_host", "db_port", "db_user", "db_name", "addons_path", "data_dir",
                    "proxy_mode", "config_file", "workers")
            self.send(200, {"server_version": VERSION, **{k: self.s[k] for k in keys},
                            "filestore": os.path.join(self.s["data_dir"], "filestore",
                                                      self.s["db_name"]),
                            "database_uuid": db_uuid, "installed_modules": modules,
                            "tables": tables,
                            "request": {"remote_addr": self.client(), "scheme": scheme,
                                        "host": host}})
        else:
            self.send(404, {"error": "not found", "path": path})

    def do_POST(self):
        path = self.path.split("?")[0]
        try:  # read the body whatever the path: the connection is kept alive
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        except ValueError:
            return self.send(400, {"error": "bad Content-Length"})
        if path != "/berth/send-mail":
            return self.send(404, {"error": "not found", "path": path})
        try:
            request = json.loads(raw or b"null")
            if not isinstance(request, dict):
                raise ValueError("the body is not a JSON object")
            msg = build_mail(self.s, request)
        except (ValueError, KeyError, TypeError) as exc:
            return self.send(400, {"sent": False, "error": f"bad request: {exc}"})
        body = request.get("html") or f"<p>{html.escape(request['body'])}</p>"
        mlog = logging.getLogger("odoo.addons.base.models.ir_mail_server")
        try:
            via, host, port, *login = self.db.outgoing(msg, body)
        except psycopg2.Error as exc:
            return self.send(503, {"sent": False, "error": str(exc).strip()})
        try:
            send_mail(msg, host, port, *login)
        except OSError as exc:
            mlog.info("Mail delivery failed via SMTP server '%s:%s' (%s): %s", host, port, via,
                      exc)
            return self.send(502, {"sent": False, "server": f"{host}:{port}", "via": via,
                                   "error": str(exc) or type(exc).__name__})
        mlog.info("Sent email with Message-Id %s via %s:%s (%s)", msg["Message-Id"], host,
                  port, via)
        self.send(200, {"sent": True, "server": f"{host}:{port}", "via": via})

    def log_message(self, fmt, *args):
        logging.getLogger("werkzeug").info("%s - - [%s] %s", self.client(),
                                           self.log_date_time_string(), fmt % args)


def module_list(text):
    return [m.strip() for m in text.split(",") if m.strip()]


def stop(signum, frame):
    raise SystemExit(0)


def report_configuration(s, unknown):
    log.info("Odoo version %s (berth test stand-in)", VERSION)
    log.info("Using configuration file at %s", s["config_file"] or "(none)")
    log.info("addons paths: %s", s["addons_path"])
    log.info("database: %s@%s:%s/%s", s["db_user"] or "default", s["db_host"] or "default",
             s["db_port"], s["db_name"] or "(none)")
    if unknown:
        log.warning("options without effect in the stand-in: %s", " ".join(unknown))


def serve(argv, env_defaults):
    # PID 1 ignores signals it has no handler for: `docker stop` would wait for SIGKILL.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format=LOG_FORMAT)
    args, unknown = parse_args(argv)
    s = checked_settings(args, env_defaults)
    report_configuration(s, unknown)
    filestore = os.path.join(s["data_dir"], "filestore", s["db_name"])
    try:
        os.makedirs(filestore, exist_ok=True)
        os.makedirs(os.path.join(s["data_dir"], "sessions"), exist_ok=True)
    except OSError as exc:
        fail(f"cannot create the filestore under data_dir {s['data_dir']}: {exc.strerror}")
    db = Database(s)
    db.wait()
    try:
        db.ensure(module_list(args.init), module_list(args.update))
    except psycopg2.Error as exc:
        fail(f"cannot set up database {s['db_name']}: {str(exc).strip()}")
    except Exception:  # a module's migration raised: Odoo logs it and stops, exit 1
        logging.getLogger("odoo.modules.registry").exception(
            "Failed to load registry (the update of database %s was rolled back)", s["db_name"])
        return 1
    if args.stop_after_init:
        log.info("stopping after init")
        return 0
    Handler.s, Handler.db = s, db
    httpd = http.server.ThreadingHTTPServer((s["http_interface"] or "", s["http_port"]), Handler)
    httpd.daemon_threads = True
    log.info("HTTP service (werkzeug) running on %s:%s", s["http_interface"] or "0.0.0.0",
             s["http_port"])
    if s["workers"] > 0:  # Odoo's prefork mode: long polling on its own port
        longpolling = http.server.ThreadingHTTPServer((s["http_interface"] or "",
                                                       s["gevent_port"]), Handler)
        longpolling.daemon_threads = True
        threading.Thread(target=longpolling.serve_forever, daemon=True).start()
        log.info("Evented Service (longpolling) running on port %s", s["gevent_port"])
    try:
        httpd.serve_forever()
    except SystemExit:
        log.info("Initiating shutdown")
    finally:
        httpd.server_close()
    return 0


def neutralize(argv, env_defaults):
    """`odoo neutralize -d DB`: Odoo's options plus --stdout; the database must exist."""
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format=LOG_FORMAT)
    nlog = logging.getLogger("odoo.modules.neutralize")
    args, unknown = parse_args(argv)
    to_stdout = "--stdout" in unknown
    unknown = [a for a in unknown if a != "--stdout"]
    if unknown:
        fail(f"unrecognized arguments: {' '.join(unknown)}")
    if not args.db_name:
        fail("neutralize needs a database: -d DB")
    s = checked_settings(args, env_defaults)
    if to_stdout:
        print("BEGIN;\n" + NEUTRALIZE_SQL + "COMMIT;")
        return 0
    db = Database(s)
    db.wait()
    try:
        conn = db.connect()
    except psycopg2.Error as exc:
        nlog.error("The database %s is not neutralized: %s", s["db_name"], str(exc).strip())
        return 1
    try:
        with conn, conn.cursor() as cr:
            nlog.info("Starting %s database neutralization", s["db_name"])
            create_tables(cr)
            cr.execute(NEUTRALIZE_SQL)
    except psycopg2.Error as exc:
        nlog.error("The database %s is not neutralized: %s", s["db_name"], str(exc).strip())
        return 1
    finally:
        conn.close()
    nlog.info("Neutralization finished")
    return 0


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


if __name__ == "__main__":
    if os.path.basename(sys.argv[0]) == "entrypoint.sh":
        sys.exit(entrypoint(sys.argv[1:]))
    sys.exit(main(sys.argv[1:], {}))
