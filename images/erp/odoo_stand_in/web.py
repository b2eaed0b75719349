"""The server: the HTTP port (8069), and with `workers` above 0 the long-polling port
(8072) where Odoo serves its websocket."""

import base64
import hashlib
import html
import http.server
import json
import logging
import os
import signal
import sys
import threading

import psycopg2

from odoo_stand_in import cron, testing
from odoo_stand_in.addons import find_addons
from odoo_stand_in.config import (
    IN_LOG,
    VERSION,
    checked_settings,
    fail,
    module_list,
    parse_args,
    report_configuration,
    start_logging,
)
from odoo_stand_in.database import Database
from odoo_stand_in.mail import build_mail, send_mail

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455
log = logging.getLogger("odoo.service.server")

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
        routes = {"/berth/send-mail": self.send_mail, "/berth/attachments": self.attach}
        if path not in routes:
            return self.send(404, {"error": "not found", "path": path})
        try:
            request = json.loads(raw or b"null")
            if not isinstance(request, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as exc:
            return self.send(400, {"error": f"bad request: {exc}"})
        routes[path](request)

    def attach(self, request):
        """An attachment as Odoo stores one: its file in the filestore, its row."""
        try:
            name, data = request["name"], base64.b64decode(request["content_base64"],
                                                            validate=True)
        except (KeyError, TypeError, ValueError) as exc:
            return self.send(400, {"error": f"bad request: {exc}"})
        try:
            row = self.db.attach(name, data)
        except (OSError, psycopg2.Error) as exc:
            return self.send(503, {"error": str(exc).strip()})
        self.send(200, row)

    def send_mail(self, request):
        try:
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


def stop(signum, frame):
    raise SystemExit(0)


def serve(argv, env_defaults):
    # PID 1 ignores signals it has no handler for: `docker stop` would wait for SIGKILL.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    start_logging(sys.stdout)
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
    IN_LOG.name = s["db_name"]
    try:
        loaded = db.ensure(module_list(args.init), module_list(args.update))
    except psycopg2.Error as exc:
        fail(f"cannot set up database {s['db_name']}: {str(exc).strip()}")
    except Exception:  # a module's migration raised: Odoo logs it and stops, exit 1
        logging.getLogger("odoo.modules.registry").exception(
            "Failed to load registry (the update of database %s was rolled back)", s["db_name"])
        return 1
    # Odoo: --test-enable alone selects the `standard` tests; --test-tags enables tests.
    tags = args.test_tags or ("+standard" if args.test_enable else None)
    passed = testing.run(db, loaded, tags) if tags else True
    if args.stop_after_init:
        log.info("stopping after init")
        return 0 if passed else 1
    Handler.s, Handler.db = s, db
    if s["max_cron_threads"] > 0:
        cron.start(db)
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
