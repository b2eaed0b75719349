"""The SSRF-safe HTTPS sender of outgoing webhooks.

`post(url, body, headers)` resolves the host once (`resolve`, replaceable in
tests), refuses non-public addresses (`urls.blocked_reason`), connects only
to the address it checked (no second resolution), verifies the certificate against
the URL's host name, never follows redirects, bounds the whole exchange by
`timeout` and never raises for network problems: it returns a `SendResult`.

`allow_private=True` (setting WEBHOOK_ALLOW_PRIVATE) lifts only the address rule.
"""

import concurrent.futures
import dataclasses
import functools
import ipaddress
import socket
import ssl
import threading
import time
from collections import OrderedDict

import certifi
import urllib3
from urllib3.connection import HTTPSConnection

from control_plane.services.webhooks.urls import blocked_reason, literal_refusal, parse

SNIPPET_CHARS = 1000
MAX_RESPONSE_BYTES = 64 * 1024
MAX_ADDRESSES_TRIED = 3
MAX_POOLS = 256


@dataclasses.dataclass(frozen=True)
class SendResult:
    ok: bool
    status_code: int | None
    duration_ms: int
    body_snippet: str | None
    error: str | None


def resolve(host, port):
    """All addresses of `host`, in the resolver's order (tests replace this)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


_resolver = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="webhook-dns")


class _Watchdog:
    """Shuts the socket of a request whose deadline passed (bounds slow-drip replies)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._entries = {}  # thread id -> [deadline, connection or None]
        self._thread = None
        self._wakes_at = float("inf")  # when the watchdog looks next by itself

    def start(self, deadline):
        with self._cv:
            self._entries[threading.get_ident()] = [deadline, None]
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="webhook-watchdog",
                                                daemon=True)
                self._thread.start()

    def attach(self, conn):
        with self._cv:
            entry = self._entries.get(threading.get_ident())
            if entry is not None:
                entry[1] = conn
                # Wake the watchdog only when this deadline comes before the one it
                # waits for: not one thread switch per request.
                if entry[0] < self._wakes_at:
                    self._cv.notify()

    def stop(self):
        with self._cv:
            self._entries.pop(threading.get_ident(), None)

    def _run(self):
        with self._cv:
            while True:
                now = time.monotonic()
                for key, (deadline, conn) in list(self._entries.items()):
                    if deadline <= now and conn is not None:
                        del self._entries[key]
                        sock = getattr(conn, "sock", None)
                        if sock is not None:
                            try:
                                sock.shutdown(socket.SHUT_RDWR)
                            except OSError:
                                pass
                pending = [d for d, c in self._entries.values() if c is not None]
                self._wakes_at = min(pending) if pending else float("inf")
                self._cv.wait(max(0.0, self._wakes_at - now) if pending else None)


_watchdog = _Watchdog()


class _Connection(HTTPSConnection):
    def connect(self):
        _watchdog.attach(self)
        super().connect()

    def request(self, *args, **kwargs):
        _watchdog.attach(self)
        super().request(*args, **kwargs)


class _Pool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _Connection


_pools = OrderedDict()
_pools_lock = threading.Lock()


_parse = functools.lru_cache(maxsize=1024)(parse)  # a pure function of the URL


@functools.lru_cache(maxsize=16)
def _ssl_context(ca_bundle):
    return ssl.create_default_context(cafile=ca_bundle or certifi.where())


def _pool(address, target, ca_bundle):
    key = (address, target.port, target.host, ca_bundle)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is not None:
            _pools.move_to_end(key)
            return pool
        pool = _Pool(address, target.port, maxsize=16, block=False, retries=False,
                     server_hostname=target.host, ssl_context=_ssl_context(ca_bundle))
        _pools[key] = pool
        if len(_pools) > MAX_POOLS:
            _pools.popitem(last=False)[1].close()
        return pool


def _chain(exc):
    seen = set()
    while isinstance(exc, BaseException) and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "reason", None)


def _describe(exc, timeout, deadline):
    """A short readable reason for a failed exchange."""
    errors = list(_chain(exc))
    timed_out = any(isinstance(e, (TimeoutError, urllib3.exceptions.TimeoutError))
                    # NewConnectionError subclasses ConnectTimeoutError, for history
                    and not isinstance(e, urllib3.exceptions.NewConnectionError)
                    for e in errors)
    if timed_out or time.monotonic() >= deadline:
        return f"timed out after {timeout:g} s"
    for e in errors:
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"TLS error: {e.verify_message or e.reason}"
        if isinstance(e, ssl.SSLError):
            return f"TLS error: {e.reason or e}"
    for e in errors:
        if isinstance(e, urllib3.exceptions.SSLError):
            return f"TLS error: {e}"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, ConnectionResetError):
            return "connection reset"
        if isinstance(e, OSError) and e.strerror:
            return f"connection failed: {e.strerror.lower()}"
    if isinstance(exc, urllib3.exceptions.ProtocolError):
        return "connection closed without a valid HTTP response"
    return f"request failed: {type(exc).__name__}"


def _read_capped(resp, deadline):
    """Up to MAX_RESPONSE_BYTES of the body; (data, complete)."""
    data = bytearray()
    while len(data) < MAX_RESPONSE_BYTES:
        if time.monotonic() >= deadline:
            raise TimeoutError
        chunk = resp.read(min(16384, MAX_RESPONSE_BYTES - len(data)), decode_content=False)
        if not chunk:
            return bytes(data), True
        data += chunk
    return bytes(data), False


def _exchange(pool, target, body, headers, timeout, deadline):
    """One request on one pool: (status, snippet) or an exception."""
    _watchdog.start(deadline)
    resp = None
    try:
        resp = pool.urlopen("POST", target.path, body=body, headers=headers,
                            retries=False, redirect=False, assert_same_host=False,
                            preload_content=False, decode_content=False,
                            timeout=urllib3.Timeout(total=max(0.001, deadline - time.monotonic())))
        data, complete = _read_capped(resp, deadline)
    except BaseException:
        _watchdog.stop()
        if resp is not None:
            resp.close()
            resp.release_conn()
        raise
    _watchdog.stop()
    if not complete or resp.length_remaining:
        resp.close()  # unread body: the connection cannot be reused
    resp.release_conn()
    return resp.status, data.decode("utf-8", "replace")[:SNIPPET_CHARS]


def _outcome(status, snippet, duration_ms):
    if 200 <= status < 300:
        return SendResult(True, status, duration_ms, snippet, None)
    if 300 <= status < 400:
        return SendResult(False, status, duration_ms, snippet,
                          f"redirect not followed ({status})")
    return SendResult(False, status, duration_ms, snippet, f"HTTP {status}")


def post(url, body, headers, *, timeout=10.0, allow_private=False, ca_bundle=None):
    """POST `body` to `url` safely; never raises for network problems."""
    started = time.monotonic()
    deadline = started + timeout

    def fail(error):
        return SendResult(False, None, int((time.monotonic() - started) * 1000), None, error)

    try:
        target = _parse(url)
    except ValueError as exc:
        return fail(f"invalid URL: {exc}")
    if target.ip is not None:
        addresses = [target.host]
    else:
        future = _resolver.submit(resolve, target.host, target.port)
        try:
            addresses = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            return fail(f"timed out after {timeout:g} s (resolving {target.host})")
        except (OSError, UnicodeError) as exc:
            return fail(f"DNS lookup failed for {target.host}: {exc}")
        if not addresses:
            return fail(f"DNS lookup failed for {target.host}: no address")
    if not allow_private:
        refusal = literal_refusal(target)
        if refusal:
            return fail(f"refused: {refusal}")
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            reason = blocked_reason(ip)
            if reason:
                return fail(f"refused: {target.host} resolves to {ip} ({reason})")
    host_header = target.url.split("/", 3)[2]
    headers = {k: v for k, v in headers.items() if k.lower() != "host"}
    headers["Host"] = host_header
    error = None
    for address in addresses[:MAX_ADDRESSES_TRIED]:
        try:
            status, snippet = _exchange(_pool(address, target, ca_bundle), target, body,
                                        headers, timeout, deadline)
        except Exception as exc:  # every network failure becomes a result
            error = _describe(exc, timeout, deadline)
            if isinstance(exc, urllib3.exceptions.NewConnectionError) and \
                    not error.startswith("timed out"):
                continue  # the next address may answer
            break
        return _outcome(status, snippet, int((time.monotonic() - started) * 1000))
    return fail(error)
