"""A restored copy made safe: Odoo's own `odoo neutralize -d DB` (Odoo 16+), run in a
one-off container of the environment's ERP image with the ERP's configuration,
add-ons and network, before the copy takes traffic. Odoo then runs each
installed module's data/neutralize.sql: outgoing mail servers off, scheduled
actions off but the autovacuum, payment providers and carriers in test mode,
and the parameter `database.is_neutralized` set."""

import re

from agent.backups import exec_stream
from agent.deploy import one_off
from agent.errors import AgentError
from protocol.errors import AgentErrorCode

TIMEOUT = 600  # seconds: a large database's UPDATEs, not a module update
LOG_TAIL = 20  # lines of the command's output kept in the task log
CONFIG = "/etc/odoo/odoo.conf"
_TRUE = ("true", "t", "1", "yes", "y")


class NeutralizeError(AgentError):
    code = AgentErrorCode.RESTORE_FAILED


def neutralize(envs, env_id, database, log, *, network_of=None, db_host=None, volumes=None):
    """`odoo neutralize` on `database` (a database name on the environment's
    PostgreSQL; or, with `network_of`, `db_host` and `volumes`, on the PostgreSQL of
    that container's network namespace with those mounts: a drill's copy); raises
    NeutralizeError with the command's last lines when it fails."""
    erp = envs._container(envs._names(env_id)["erp"])
    if erp is None:
        raise NeutralizeError("the environment has no ERP container to neutralise with")
    config = erp.attrs.get("Config") or {}
    log("info", f"neutralising the restored database (odoo neutralize -d {database})")
    try:
        code, _ = one_off.run(
            envs, env_id, "neutralize", config.get("Image") or erp.image.id,
            ["odoo", "neutralize", "-c", CONFIG, "-d", database,
             *(["--db_host", db_host] if db_host else [])],
            volumes=volumes or (erp.attrs.get("HostConfig") or {}).get("Binds") or [],
            environment=config.get("Env") or [], timeout=TIMEOUT, log=log, tail=LOG_TAIL,
            network_of=network_of)
    except AgentError as exc:
        raise NeutralizeError(f"odoo neutralize did not finish: {exc}") from exc
    if code != 0:
        raise NeutralizeError(f"odoo neutralize failed (exit {code}): the restored database "
                              "was not neutralised")
    log("info", "the restored database is neutralised")


DUMMY = "neutralization - disable emails"  # the mail server neutralize.sql adds
_PLAIN = re.compile(r"[A-Za-z0-9.:-]+")


def catch_mail(api, db_container, database, mail, log):
    """The neutralised copy's dummy mail server (host `invalid`, so that nothing
    falls back to a configured one) pointed at the server's mail catcher instead:
    what the copy sends is kept to be read, and still leaves for nowhere."""
    values = [str(mail[key]) for key in ("host", "port", "user", "password")]
    if not all(_PLAIN.fullmatch(v) for v in values):  # ours alone; still never quoted blindly
        raise NeutralizeError("unexpected characters in the mail catcher's settings")
    host, port, user, password = values
    sql = (f"WITH pointed AS (UPDATE ir_mail_server SET smtp_host = '{host}', "
           f"smtp_port = {int(port)}, smtp_user = '{user}', smtp_pass = '{password}', "
           f"smtp_encryption = 'none' WHERE name = '{DUMMY}' AND active RETURNING id) "
           "SELECT count(*) FROM pointed")
    try:
        changed = exec_stream.run(api, db_container.id, [
            "psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-U", "odoo",
            "-d", database, "-c", sql], what="psql").strip()
    except AgentError:  # never its message: psql would quote the statement
        log("warning", "the copy's mail could not be pointed at the mail catcher")
        return
    if changed in ("", "0"):
        log("warning", "the copy has no dummy mail server to point at the mail catcher")
        return
    log("info", "the copy's mail goes to this server's mail catcher")


def is_neutralized(api, db_container, database="odoo"):
    """The database's `database.is_neutralized` parameter: True or False, or None
    where it cannot be read (not an Odoo database)."""
    sql = ("SELECT CASE WHEN to_regclass('ir_config_parameter') IS NULL THEN '?' ELSE "
           "coalesce((SELECT value FROM ir_config_parameter "
           "WHERE key = 'database.is_neutralized'), 'false') END")
    try:
        value = exec_stream.run(api, db_container.id, ["psql", "-X", "-q", "-t", "-A",
                                                       "-U", "odoo", "-d", database,
                                                       "-c", sql], what="psql").strip()
    except AgentError:
        return None
    return None if value == "?" else value.lower() in _TRUE
