"""A real HTTPS webhook receiver for tests.

Fixtures:
- `trust_ca`: path of the test CA's PEM file; give it to the sender
  (`ca_bundle=trust_ca`, setting WEBHOOK_CA_BUNDLE).
- `https_receiver` (function scope): a running `Receiver` (its `ca_path` is the CA
  file too), shut down after the test. Import both names where they are used.

Receiver:
- `url` ("https://127.0.0.1:<port>") and `localhost_url` ("https://localhost:<port>");
  its certificate is valid for localhost, 127.0.0.1 and ::1 (it listens on 127.0.0.1).
- `connections`: how many connections it accepted.
- `requests`: every request received, in order, as `Received(method, path, headers,
  body, time, client)`; `headers` is case-insensitive, `body` the raw bytes, `time`
  epoch s, `client` the sender's address.
- `Receiver(ca, host)` listens on another address of this machine (a bridge's, for
  senders in containers); its certificate is valid for it too.
- `wait_for(n, timeout=5)`: block until `n` requests arrived; return `requests`.
- `verify(received, secret)`: True when `X-SVC-Signature` is `sha256=<hex>` of the
  HMAC-SHA256 of the raw body keyed with `secret` (timing-safe comparison).
- `close()`: stop listening and drop open connections (the fixture does it).
- Behaviour, for one `path` or (path None) for every path without its own rule:
  `respond(500, 500, then=200)` answers the listed statuses once each, then `then`;
  `hang(seconds, then=200)` waits that long before answering `then`;
  `redirect(location, status=302)` answers a redirect. `reset()` clears rules and
  requests. Default: 200 with body `{"ok": true}`.
"""

import atexit
import dataclasses
import functools
import hmac
import http.server
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time

import pytest
import trustme


@dataclasses.dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: object  # email.message.Message: case-insensitive .get()
    body: bytes
    time: float
    client: str = ""  # the sender's address


@dataclasses.dataclass
class _Rule:
    statuses: list
    then: int = 200
    hang: float = 0.0
    location: str | None = None


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def _handle(self):
        receiver = self.server.receiver
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        hang, status, location = receiver._record(
            Received(self.command, self.path, self.headers, body, time.time(),
                     self.client_address[0]))
        if hang:
            receiver._stopping.wait(hang)
        payload = b'{"ok": true}' if 200 <= status < 300 else b'{"ok": false}'
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_POST = do_GET = do_PUT = _handle

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def get_request(self):
        conn, address = super().get_request()
        self.open_connections.add(conn)
        self.receiver.connections += 1
        return conn, address

    def shutdown_request(self, request):
        self.open_connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):
        pass  # failed handshakes (clients that do not trust the CA) are expected


class Receiver:
    def __init__(self, ca, host="127.0.0.1"):
        cert = ca.issue_cert(*dict.fromkeys(("localhost", "127.0.0.1", "::1", host)))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(context)
        self._server = _Server((host, 0), _Handler)
        self._server.socket = context.wrap_socket(
            self._server.socket, server_side=True, do_handshake_on_connect=False)
        self._server.receiver = self
        self._server.open_connections = set()
        self.port = self._server.server_address[1]
        self.url = f"https://{host}:{self.port}"
        self.localhost_url = f"https://localhost:{self.port}"
        self.requests = []
        self.connections = 0  # accepted so far
        self._rules = {}
        self._cv = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        args=(0.05,), daemon=True)
        self._thread.start()

    def _record(self, received):
        """Store a request; return how to answer it: (hang, status, location)."""
        with self._cv:
            self.requests.append(received)
            self._cv.notify_all()
            rule = self._rules.get(received.path) or self._rules.get(None) or _Rule([])
            status = rule.statuses.pop(0) if rule.statuses else rule.then
            return rule.hang, status, rule.location

    def _set(self, path, rule):
        with self._cv:
            self._rules[path] = rule

    def respond(self, *statuses, then=200, path=None):
        self._set(path, _Rule(list(statuses), then))

    def hang(self, seconds, path=None, then=200):
        self._set(path, _Rule([], then=then, hang=seconds))

    def redirect(self, location, status=302, path=None):
        self._set(path, _Rule([], then=status, location=location))

    def reset(self):
        with self._cv:
            self._rules.clear()
            self.requests.clear()

    def wait_for(self, n, timeout=5.0):
        with self._cv:
            self._cv.wait_for(lambda: len(self.requests) >= n, timeout)
            return list(self.requests)

    @staticmethod
    def verify(received, secret):
        if isinstance(secret, str):
            secret = secret.encode()
        expected = "sha256=" + hmac.new(secret, received.body, "sha256").hexdigest()
        return hmac.compare_digest(expected, received.headers.get("X-SVC-Signature") or "")

    def close(self):
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        for conn in list(self._server.open_connections):  # kept-alive ones too
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@functools.cache
def _ca():
    """One CA per test process; its PEM in a temporary directory removed at exit."""
    ca = trustme.CA()
    directory = tempfile.mkdtemp(prefix="webhook-ca-")
    atexit.register(shutil.rmtree, directory, True)
    ca.cert_pem.write_to_path(os.path.join(directory, "ca.pem"))
    return ca, os.path.join(directory, "ca.pem")


@pytest.fixture
def trust_ca():
    return _ca()[1]


@pytest.fixture
def https_receiver():
    ca, ca_path = _ca()
    receiver = Receiver(ca)
    receiver.ca_path = ca_path
    yield receiver
    receiver.close()
