"""The SSRF-safe HTTPS sender of outgoing webhooks.

`post(url, body, headers)` resolves the host once (`resolve`, replaceable in
tests), refuses non-public addresses (`urls.blocked_reason`), connects only
to the address it checked (no second resolution), verifies the certificate against
the URL's host name, never follows redirects, bounds the whole exchange by
`timeout` and never raises for network problems: it returns a `SendResult`.

The exchange is HTTP/1.1 over kept-alive TLS sockets, the answer parsed by
httptools (llhttp): a webhook is one small POST and one short answer, and a
general-purpose client's per-request work was most of the sender's CPU.

`allow_private=True` (setting WEBHOOK_ALLOW_PRIVATE) lifts only the address rule.
"""

import concurrent.futures
import dataclasses
import functools
import ipaddress
import re
import select
import socket
import ssl
import threading
import time
from collections import OrderedDict

import certifi
import httptools

from control_plane.services.webhooks.urls import blocked_reason, literal_refusal, parse

SNIPPET_CHARS = 1000
MAX_RESPONSE_BYTES = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024  # status line and headers of an answer
MAX_IDLE = 16  # kept-alive connections per address and host name
MAX_ADDRESSES_TRIED = 3
MAX_POOLS = 256


@dataclasses.dataclass(frozen=True)
class SendResult:
    ok: bool
    status_code: int | None
    duration_ms: int
    body_snippet: str | None
    error: str | None


def failed(error):
    """An attempt that never reached the receiver (nothing sent)."""
    return SendResult(False, None, None, None, error)


def resolve(host, port):
    """All addresses of `host`, in the resolver's order (tests replace this)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


_resolver = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="webhook-dns")


class _BadReply(Exception):
    """The receiver closed the connection or answered something that is not HTTP."""


class _NotConnected(Exception):
    """No connection to this address (the next one may answer); the cause says why."""


_parse = functools.lru_cache(maxsize=1024)(parse)  # a pure function of the URL


@functools.lru_cache(maxsize=16)
def _ssl_context(ca_bundle):
    return ssl.create_default_context(cafile=ca_bundle or certifi.where())


# Kept-alive connections, idle: (address, port, host, CA bundle) -> TLS sockets. A
# socket is used by one send at a time (taken out while in use).
_idle = OrderedDict()
_idle_lock = threading.Lock()


def _left(deadline):
    """Seconds left before `deadline`; every blocking call waits at most that long."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _dropped(sock):
    """True when an idle connection was closed by the receiver (or sent unasked data)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _checkout(key):
    with _idle_lock:
        socks = _idle.get(key)
        while socks:
            sock = socks.pop()
            if not _dropped(sock):
                return sock
            sock.close()
    return None


def _checkin(key, sock):
    with _idle_lock:
        socks = _idle.setdefault(key, [])
        _idle.move_to_end(key)
        if len(socks) < MAX_IDLE:
            socks.append(sock)
            sock = None
        evicted = _idle.popitem(last=False)[1] if len(_idle) > MAX_POOLS else ()
    for extra in ([sock] if sock else []) + list(evicted):
        extra.close()


def _connect(address, target, ca_bundle, deadline):
    """A new TLS connection to the checked address; the certificate is verified for
    the URL's host name. Raises _NotConnected when the TCP connection fails."""
    try:
        raw = socket.create_connection((address, target.port), timeout=_left(deadline))
    except OSError as exc:
        raise _NotConnected from exc
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        raw.settimeout(_left(deadline))  # bounds the whole handshake
        return _ssl_context(ca_bundle).wrap_socket(raw, server_hostname=target.host)
    except BaseException:
        raw.close()
        raise


def _chain(exc):
    seen = set()
    while isinstance(exc, BaseException) and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _describe(exc, timeout, deadline):
    """A short readable reason for a failed exchange."""
    errors = list(_chain(exc))
    if any(isinstance(e, TimeoutError) for e in errors) or time.monotonic() >= deadline:
        return f"timed out after {timeout:g} s"
    for e in errors:
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"TLS error: {e.verify_message or e.reason}"
        if isinstance(e, ssl.SSLError):
            return f"TLS error: {e.reason or e}"
    for e in errors:
        if isinstance(e, (_BadReply, httptools.HttpParserError)):
            return "connection closed without a valid HTTP response"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, ConnectionResetError):
            return "connection reset"
        if isinstance(e, OSError) and e.strerror:
            return f"connection failed: {e.strerror.lower()}"
    return f"request failed: {type(exc).__name__}"


_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f]")  # would end a request line or header early


def _request_head(target, headers, length, method="POST"):
    lines = [f"{method} {target.path} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {length}")
    if any(_FORBIDDEN.search(line) for line in lines):
        raise ValueError("a control character in the request head")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


class _Reply:
    """httptools callbacks for one response: its body (up to MAX_RESPONSE_BYTES)."""

    __slots__ = ("parser", "body", "head_done", "done", "extra", "overflow", "keep_alive")

    def __init__(self):
        self.body = bytearray()
        self.head_done = self.done = self.extra = self.overflow = self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self):
        self.extra = self.done  # a second answer to one request: do not reuse

    def on_headers_complete(self):
        self.head_done = True

    def on_body(self, chunk):
        room = MAX_RESPONSE_BYTES - len(self.body)
        if len(chunk) > room:
            self.overflow, chunk = True, chunk[:room]
        self.body += chunk

    def on_message_complete(self):
        if self.parser.get_status_code() >= 200:
            # asked here: once the message is complete the parser has reset
            self.done, self.keep_alive = True, self.parser.should_keep_alive()
        else:  # an interim answer (100 Continue): the final one follows
            self.head_done = False


def _read_reply(sock, deadline):
    """(status, body, reusable); the body is cut at MAX_RESPONSE_BYTES."""
    reply, head_bytes = _Reply(), 0
    while not reply.done and not reply.overflow:
        sock.settimeout(_left(deadline))
        data = sock.recv(65536)
        if not data:
            if not reply.head_done:
                raise _BadReply
            break  # a body that ends with the connection
        if not reply.head_done:
            head_bytes += len(data)
            if head_bytes > MAX_HEAD_BYTES:
                raise _BadReply
        reply.parser.feed_data(data)
    reusable = reply.keep_alive and not (reply.overflow or reply.extra)
    return reply.parser.get_status_code(), bytes(reply.body), reusable


def _exchange(address, target, payload, ca_bundle, deadline):
    """One request to one checked address, on a kept-alive connection when there is
    one: (status, snippet) or an exception."""
    key = (address, target.port, target.host, ca_bundle)
    sock = _checkout(key) or _connect(address, target, ca_bundle, deadline)
    try:
        sock.settimeout(_left(deadline))
        sock.sendall(payload)
        status, data, reusable = _read_reply(sock, deadline)
    except BaseException:
        sock.close()
        raise
    if reusable:
        _checkin(key, sock)
    else:
        sock.close()
    return status, data.decode("utf-8", "replace")[:SNIPPET_CHARS]


def _outcome(status, snippet, duration_ms):
    if 200 <= status < 300:
        return SendResult(True, status, duration_ms, snippet, None)
    if 300 <= status < 400:
        return SendResult(False, status, duration_ms, snippet,
                          f"redirect not followed ({status})")
    return SendResult(False, status, duration_ms, snippet, f"HTTP {status}")


def post(url, body, headers, *, timeout=10.0, allow_private=False, ca_bundle=None,
         method="POST"):
    """POST (or `method`) `body` to `url` safely; never raises for network problems."""
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
    headers = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
    try:
        payload = _request_head(target, {"Host": target.url.split("/", 3)[2], **headers},
                                len(body), method) + body
    except (ValueError, UnicodeError) as exc:
        return fail(f"invalid request: {exc}")
    error = None
    for address in addresses[:MAX_ADDRESSES_TRIED]:
        try:
            status, snippet = _exchange(address, target, payload, ca_bundle, deadline)
        except Exception as exc:  # every network failure becomes a result
            error = _describe(exc, timeout, deadline)
            if isinstance(exc, _NotConnected) and not error.startswith("timed out"):
                continue  # the next address may answer
            break
        return _outcome(status, snippet, int((time.monotonic() - started) * 1000))
    return fail(error)
