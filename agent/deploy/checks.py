"""Post-deploy checks: after the new ERP answers its health check and the proxy
routes to it, and before the deploy counts as done, what users most often find
broken after a deploy that answered:

- `websocket`: with workers, a real WebSocket handshake on /websocket at the
  environment's first host name, through this server's proxy (else on the ERP's
  long-polling port): real-time features need the route to port 8072;
- `cron`: the cron runner alive: the most frequent active scheduled action is
  triggered (`ir_cron_trigger` and `NOTIFY cron_trigger`, as Odoo's `_trigger()`
  does) and its `lastcall` must advance; skipped when crons are off
  (`max_cron_threads` 0, or a neutralised database);
- `modules`: no module left `to upgrade`, `to install` or `to remove`;
- `attachments`: a sample of stored attachments (the newest, and a run from a
  random point) have their files in the filestore; it fails when half or more
  are missing (a filestore that is not where the ERP looks), while a few missing
  files of an old database are the size report's to count.

Each gives {name, status: passed|failed|skipped, detail}; none raises. A check that
cannot look (a TLS handshake with no certificate yet, a database not made yet) is
skipped and says why."""

import os
import socket
import ssl
import time
from pathlib import Path

from agent.deploy import updates
from agent.errors import AgentError, engine_errors

CRON_WAIT = float(os.environ.get("BERTH_AGENT_CRON_CHECK_SECONDS", "75"))  # Odoo polls every 60 s
CRON_POLL = 0.5
HANDSHAKE_TIMEOUT = 30  # seconds: an on-demand certificate may be issued first
WS_SETTLE, WS_RETRY = 10.0, 0.5  # seconds a failing handshake is tried again, and between
SAMPLE = 20
PENDING = ("to upgrade", "to install", "to remove")
LONGPOLL_PORT = 8072

CRON_SQL = (
    "SELECT CASE WHEN to_regclass('ir_cron_trigger') IS NULL THEN '?' ELSE"
    " coalesce((SELECT value FROM ir_config_parameter WHERE key = 'database.is_neutralized'),"
    " 'false') || '|' || coalesce((SELECT id || '|' || coalesce(lastcall::text, '') FROM"
    " ir_cron WHERE active ORDER BY interval_number * CASE interval_type WHEN 'minutes'"
    " THEN 60 WHEN 'hours' THEN 3600 WHEN 'days' THEN 86400 WHEN 'weeks' THEN 604800"
    " ELSE 2592000 END, id LIMIT 1), '') END")
SAMPLE_SQL = (
    "SELECT CASE WHEN to_regclass('ir_attachment') IS NULL THEN '?' ELSE"
    " coalesce((SELECT string_agg(f, E'\\n') FROM ("
    f"(SELECT store_fname AS f FROM ir_attachment WHERE store_fname <> '' ORDER BY id DESC"
    f" LIMIT {SAMPLE}) UNION (SELECT store_fname FROM ir_attachment WHERE store_fname <> ''"
    " AND id >= (SELECT floor(random() * max(id)) FROM ir_attachment) ORDER BY id"
    f" LIMIT {SAMPLE})) s), '') END")


def run(docker, env_dir, proxy, spec, result, log):
    """The checks' report, each logged as it ends. `env_dir`: the environment's
    directory on this server; `proxy`: this server's, or None."""
    with engine_errors():
        db = docker.containers.get(result["db_container"])
    filestore = Path(env_dir) / "filestore" / "filestore" / updates.DB
    report = []
    for name, check in (("websocket", lambda: websocket(proxy, spec, result)),
                        ("cron", lambda: cron(db, spec)),
                        ("modules", lambda: modules(db)),
                        ("attachments", lambda: attachments(db, filestore))):
        try:
            status, detail = check()
        except Exception as exc:  # noqa: BLE001 - a check that breaks does not look
            status, detail = "skipped", f"could not look: {exc}"
        report.append({"name": name, "status": status, "detail": detail})
        log("error" if status == "failed" else "info",
            f"post-deploy check {name}: {status}: {detail}")
    return report


def _sql(db, sql):
    with engine_errors():
        code, out = db.exec_run(["psql", "-X", "-q", "-t", "-A", "-U", updates.DB,
                                 "-d", updates.DB, "-v", "ON_ERROR_STOP=1", "-c", sql])
    text = out.decode(errors="replace").strip()
    if code != 0:
        raise AgentError(f"psql: {text[-300:]}")
    return text


# --- websocket ----------------------------------------------------------------------

def websocket(proxy, spec, result):
    """With workers: the handshake, tried again for up to WS_SETTLE seconds (the ERP's
    long-polling server may start after its HTTP one has answered; the proxy may be
    loading its new route); the last failure is the check's."""
    workers = int((spec.get("erp_options") or {}).get("workers") or 0)
    if workers <= 0:
        return "skipped", "no workers: the ERP serves /websocket on its HTTP port"
    deadline = time.monotonic() + WS_SETTLE
    while True:
        status, detail = _handshake(proxy, spec, result)
        if status != "failed" or time.monotonic() >= deadline:
            return status, detail
        time.sleep(WS_RETRY)


def _handshake(proxy, spec, result):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    hostnames = spec.get("hostnames") or []
    if proxy is not None and hostnames:
        from agent.proxy.proxy import listen_addresses

        host, port = listen_addresses()[1].rsplit(":", 1)
        name, where = hostnames[0], f"https://{hostnames[0]}/websocket through the proxy"
        try:
            sock = _tls(host.strip("[]") or "127.0.0.1", int(port), name)
        except (OSError, ssl.SSLError) as exc:
            return "skipped", f"no TLS connection to {name} yet ({exc}): its certificate " \
                              "state says why"
    else:
        ip = result["erp_address"].rsplit(":", 1)[0]
        name, where = ip, f"the ERP's long-polling port {ip}:{LONGPOLL_PORT} (no proxy here)"
        try:
            sock = socket.create_connection((ip, LONGPOLL_PORT), timeout=HANDSHAKE_TIMEOUT)
        except OSError as exc:
            return "failed", f"nothing answers on {where}: {exc}"
    try:  # the TLS (or plain) socket as is: the handshake is the WebSocket's own
        with connect(f"ws://{name}/websocket", sock=sock, origin=f"https://{name}",
                     open_timeout=HANDSHAKE_TIMEOUT, close_timeout=1):
            pass
    except InvalidStatus as exc:
        return "failed", f"{where} answered {exc.response.status_code} to the upgrade " \
                         "(real-time features need it routed to the long-polling port)"
    except Exception as exc:  # noqa: BLE001 - refused, reset, timed out: the route fails
        return "failed", f"the WebSocket handshake on {where} failed: " \
                         f"{type(exc).__name__}: {exc}"
    finally:
        sock.close()
    return "passed", f"WebSocket handshake on {where}"


def _tls(host, port, name):
    context = ssl.create_default_context()
    # The route is what is checked here, not the certificate (the names' state is).
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    raw = socket.create_connection((host, port), timeout=HANDSHAKE_TIMEOUT)
    try:
        return context.wrap_socket(raw, server_hostname=name)
    except BaseException:
        raw.close()
        raise


# --- cron ---------------------------------------------------------------------------

def cron(db, spec):
    if str((spec.get("erp_options") or {}).get("max_cron_threads", "")).strip() == "0":
        return "skipped", "max_cron_threads is 0: this ERP runs no crons"
    row = _sql(db, CRON_SQL)
    if row == "?":
        return "skipped", "the database has no cron tables (not made yet)"
    neutralized, _, job = row.partition("|")
    if neutralized.lower() in ("true", "1", "t"):
        return "skipped", "a neutralised database: its crons are off"
    if not job:
        return "skipped", "no active scheduled action"
    job_id, _, before = job.partition("|")
    _sql(db, f"INSERT INTO ir_cron_trigger (cron_id, call_at) VALUES ({int(job_id)},"
             " now() at time zone 'UTC'); NOTIFY cron_trigger, 'odoo'")
    since = f"'{before}'::timestamp" if before else "'-infinity'::timestamp"
    deadline = time.monotonic() + CRON_WAIT
    while time.monotonic() < deadline:
        if _sql(db, f"SELECT lastcall > {since} FROM ir_cron WHERE id = {int(job_id)}") == "t":
            return "passed", f"scheduled action {job_id} ran when triggered"
        time.sleep(CRON_POLL)
    return "failed", f"scheduled action {job_id} was triggered and did not run within " \
                     f"{CRON_WAIT:g} s: the cron runner is not running"


# --- modules and attachments ----------------------------------------------------------

def modules(db):
    rows = updates.installed(db)
    if rows is None:
        return "skipped", "the database is not made yet"
    left = sorted(f"{name} ({state})" for name, (state, _) in rows.items() if state in PENDING)
    if left:
        return "failed", f"modules left half-done: {', '.join(left)}"
    return "passed", f"{len(rows)} modules, none left to upgrade, install or remove"


def attachments(db, filestore):
    out = _sql(db, SAMPLE_SQL)
    if out == "?":
        return "skipped", "the database has no attachments table (not made yet)"
    names = [line for line in out.splitlines() if line.strip()]
    if not names:
        return "skipped", "no attachment is stored in the filestore"
    root = Path(filestore).resolve()
    missing = [n for n in names if not _present(root, n)]
    if len(missing) * 2 >= len(names):
        return "failed", f"{len(missing)} of {len(names)} sampled attachments have no file " \
                         f"under the filestore (e.g. {missing[0]})"
    if missing:
        return "passed", f"{len(missing)} of {len(names)} sampled attachments have no file " \
                         "(the size report counts them all)"
    return "passed", f"{len(names)} sampled attachments, each with its file"


def _present(root, name):
    path = (root / name).resolve()
    return path.is_relative_to(root) and path.is_file()
