"""The HTTP server `berth serve` and `berth web` use: tornado's HTTP/1.1 server on
asyncio, the Flask app on a thread pool (CP_HTTP_THREADS).

One event loop holds idle and slow connections for the price of a socket each
(a connection's first head is read by _FirstHead before tornado takes it over),
and the request headers have a total deadline (CP_HTTP_HEADER_TIMEOUT), so slow
clients can neither use up the worker threads nor hold a connection for ever.
Beyond CP_HTTP_MAX_CONNECTIONS open connections, new ones are closed at once:
running out of file descriptors would stop the whole process."""

import asyncio
import json
import logging
import os
import re
import resource
import signal
import socket
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPHeaders, HTTPMessageDelegate, HTTPServerRequest, ResponseStartLine
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream, UnsatisfiableReadError
from tornado.netutil import bind_sockets
from tornado.wsgi import WSGIContainer
from werkzeug.wsgi import FileWrapper

from control_plane import storage
from control_plane.infra.config import Config
from control_plane.storage import PART_MAX, SPOOLED
from control_plane.storage.tokens import PATH as STORAGE_PATH
from control_plane.vocabulary.errors import HTTP_CODES

MAX_HEADER_BYTES = 64 * 1024
# Bodies up to the app's own limit plus this reach Flask, which answers the
# spec's 413; larger ones are refused here, before they are read.
BODY_HEADROOM = 64 * 1024
FD_RESERVE = 256  # descriptors kept for the database, the gateway, files
STOP_GRACE_SECONDS = 20  # in-flight requests get this long to finish on SIGTERM
LINGER_SECONDS = 2  # after an error answer, how long unread input is drained
LINGER_BYTES = 256 * 1024
STREAM_AFTER = 256 * 1024  # larger answers are sent in pieces of about this size
SPOOL_IN_MEMORY = 1024 * 1024  # a spooled body past this goes to a temporary file
# Files the app sends (storage downloads, the wheelhouse) are read this much at a
# time, not werkzeug's 8 KiB: a backup's gigabyte is a thousand trips, not 130,000.
FILE_BLOCK = 1024 * 1024
# Request bodies reach the app in pieces of up to this size (tornado's default 64 KiB).
BODY_CHUNK = 512 * 1024
# What a connection reads from its socket at once. tornado allocates (and zeroes) a
# buffer of this size for every read, also the one that finds nothing more: at 512 KiB
# (its HTTPServer passes BODY_CHUNK here too) each small request or WebSocket message
# paid for a large allocation, the largest cost of a shell session's keystroke. Only a
# storage upload, whose body is large, reads BODY_CHUNK at once.
READ_CHUNK = 64 * 1024

log = logging.getLogger("berth")
# WSGIContainer logs every 4xx as a warning; with no logging set up that would
# reach stderr (waitress logged no requests either). Configured handlers still get it.
logging.getLogger("tornado.access").addHandler(logging.NullHandler())


def run_http(app, host, port, beside=0):
    """Serve `app` until SIGTERM or SIGINT; prints the bound address (port 0: any).
    `beside`: connections something else in the process may hold (the gateway's),
    kept out of the HTTP cap's descriptors."""
    asyncio.run(_serve(app, host, port, beside))


async def _serve(app, host, port, beside=0):
    cfg = {**vars(Config), **app.config}  # an app without Berth's settings gets the defaults
    executor = ThreadPoolExecutor(cfg["HTTP_THREADS"], thread_name_prefix="berth-http")
    container = _Container(app, executor=executor)
    server = _Server(container, max_connections=_connection_cap(cfg["HTTP_MAX_CONNECTIONS"], beside),
                     spool_dir=_spool_dir(app), sockets=_sockets(app),
                     idle_connection_timeout=cfg["HTTP_HEADER_TIMEOUT"],
                     body_timeout=cfg["HTTP_BODY_TIMEOUT"], max_header_size=MAX_HEADER_BYTES,
                     chunk_size=BODY_CHUNK,
                     max_body_size=(cfg.get("MAX_CONTENT_LENGTH") or 0) + BODY_HEADROOM)
    sockets = bind_sockets(port, host, backlog=1024)
    server.add_sockets(sockets)
    # Tests and scripts read the bound port from this line (port 0 picks one).
    print(f"berth: listening on http://{_fmt(host)}:{sockets[0].getsockname()[1]}",
          file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if threading.current_thread() is threading.main_thread():  # else: serves until exit
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.stop()  # no new connections
    for _ in range(STOP_GRACE_SECONDS * 10):
        if not container.in_flight:
            break
        await asyncio.sleep(0.1)
    await server.close_all_connections()
    executor.shutdown(wait=False, cancel_futures=True)


class _Container(WSGIContainer):
    """WSGIContainer, with the app called and an answer of up to STREAM_AFTER bytes
    read in one trip to a worker thread (tornado's makes one more per chunk: each
    trip waits for the GIL, which the event loop and the workers share); a larger
    answer (the agent wheelhouse) goes out chunk by chunk, never whole in memory.
    It counts the requests being answered, so that a stop can wait for them."""

    in_flight = 0

    def environ(self, request):
        environ = super().environ(request)
        environ["wsgi.file_wrapper"] = _file_wrapper
        spool = getattr(request, "spool", None)
        if spool is not None:  # a part upload's body, read from its file
            environ["wsgi.input"] = spool
            environ["CONTENT_LENGTH"] = str(request.spool_size)
            if _spool_path(spool):
                environ[SPOOLED] = spool.name  # the storage may move the file into place
        return environ

    async def handle_request(self, request):
        try:
            await self._handle(request)
        finally:
            if getattr(request, "spool", None) is not None:
                _discard_spool(request.spool)

    async def _handle(self, request):
        self.in_flight += 1
        loop = IOLoop.current()
        rest = None
        try:
            status, headers, body, rest = await loop.run_in_executor(
                self.executor, self._call, self.environ(request))
            code, reason = status.split(" ", 1)
            names = {name.lower() for name, _ in headers}
            if rest is None and code != "304" and "content-length" not in names:
                headers.append(("Content-Length", str(len(body))))
            out = HTTPHeaders()
            for name, value in headers:
                out.add(name, value)
            conn = request.connection
            await conn.write_headers(ResponseStartLine("HTTP/1.1", int(code), reason), out,
                                     chunk=body)
            while rest is not None:
                chunk = await loop.run_in_executor(self.executor, _next_chunks, rest)
                if chunk is None:
                    break
                await conn.write(chunk)  # waits while the client is slower than us
            conn.finish()
        finally:
            self.in_flight -= 1
            if rest is not None:
                await loop.run_in_executor(self.executor, _close, rest)

    def _call(self, environ):
        """(status, headers, body, None), or the first STREAM_AFTER bytes and the
        iterator that still holds the rest."""
        answer = {}

        def start_response(status, headers, exc_info=None):
            answer["status"], answer["headers"] = status, headers
            return chunks.append

        chunks, size = [], 0
        result = self.wsgi_application(environ, start_response)
        try:
            for chunk in result:
                chunks.append(chunk)
                size += len(chunk)
                if size > STREAM_AFTER:  # the caller sends the rest, then closes it
                    return answer["status"], answer["headers"], b"".join(chunks), result
        except BaseException:
            _close(result)
            raise
        _close(result)
        return answer["status"], answer["headers"], b"".join(chunks), None


def _spool_dir(app):
    """A function naming where part uploads are spooled: Berth's local storage's
    own directory (made at the first part), so that a part is moved into place
    rather than copied again; None from it (a temporary file in memory, then in
    the system's directory) for S3. Resolved at the first part, not at start."""
    if "berth" not in getattr(app, "extensions", {}):
        return None

    def where():
        try:
            store = storage.from_settings(app.config)
        except (KeyError, ValueError):
            return None
        return store.spool_dir() if hasattr(store, "spool_dir") else None
    return where


def _sockets(app):
    """The shell sessions' WebSockets (control_plane/shell_socket.py), for Berth's app."""
    if "berth" not in getattr(app, "extensions", {}):
        return None
    from control_plane import shell_socket

    return shell_socket


def _spool_path(spool):
    """The file's path if the spool is a named file (not one in memory)."""
    name = getattr(spool, "name", None)
    return name if isinstance(name, str) else None


def _discard_spool(spool):
    spool.close()
    path = _spool_path(spool)
    if path:  # a named spool the storage did not take
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _file_wrapper(file, buffer_size=None):
    return FileWrapper(file, FILE_BLOCK)


def _close(result):
    if hasattr(result, "close"):
        result.close()


def _next_chunks(iterator):
    """About STREAM_AFTER bytes of what is left, or None at the end."""
    chunks, size = [], 0
    for chunk in iterator:
        chunks.append(chunk)
        size += len(chunk)
        if size >= STREAM_AFTER:
            break
    return b"".join(chunks) if chunks else None


class _Server(HTTPServer):
    def initialize(self, *args, max_connections, spool_dir=None, sockets=None, **kwargs):
        super().initialize(*args, **kwargs)
        self.max_connections, self.open_connections = max_connections, 0
        self.spool_dir = spool_dir
        self.sockets = sockets  # the shell_socket module, for Berth's app
        self.socket_app = sockets.application(self.request_callback.wsgi_application) \
            if sockets else None

    def start_request(self, server_conn, request_conn):
        adapter = _Adapter(self.request_callback, request_conn, self.spool_dir)
        if self.sockets is None:
            return adapter
        return _Switch(adapter, lambda: self.socket_app.start_request(server_conn, request_conn),
                       self.sockets.wants)

    def _handle_connection(self, connection, address):
        """tornado's accept callback. No tornado object is made for a connection
        until _FirstHead has its first head (plain TCP: this server is never given
        ssl_options), so a slow client that never finishes costs a socket."""
        if self.open_connections >= self.max_connections:
            connection.close()
            return
        self.open_connections += 1
        _FirstHead(connection, address, self.conn_params.header_timeout, self._head_in,
                   self._expired)

    # _handle_connection and the stream's read buffer are tornado's own, not its
    # API: tests/control_plane/test_http_server.py fails if an upgrade changes them
    # (the JSON 400s are set up here; a head's bytes must reach the app).
    def _head_in(self, connection, address, head):
        stream = IOStream(connection, max_buffer_size=self.max_buffer_size,
                          read_chunk_size=READ_CHUNK)
        stream._read_buffer += head  # tornado reads these first, as its own
        stream._read_buffer_size += len(head)
        _answer_errors_in_json(stream)
        self.handle_stream(stream, address)

    def _expired(self, connection):
        connection.close()
        self.open_connections -= 1

    def on_close(self, server_conn):
        self.open_connections -= 1
        super().on_close(server_conn)


# tornado's own end-of-head pattern (HTTP1Connection._read_message_inner).
_HEAD_END = re.compile(rb"\r?\n\r?\n")


class _FirstHead:
    """Reads a new connection's request head with one bare reader callback, then
    hands the socket and the bytes read to `then`. A slow client (a header byte a
    second, reconnecting when cut) costs a recv and a search per byte here, not a
    pass through tornado's stream, future and timeout machinery: on the event loop
    that took the CPU the legitimate requests needed. The total header deadline is
    the same (`expired` at it); a head past MAX_HEADER_BYTES, an EOF or an error is
    handed over as well, for tornado to answer or close as before."""

    __slots__ = ("sock", "address", "fd", "buf", "loop", "timer", "then", "expired")

    def __init__(self, sock, address, deadline, then, expired):
        self.sock, self.address, self.buf = sock, address, bytearray()
        self.then, self.expired = then, expired
        sock.setblocking(False)
        self.loop = asyncio.get_running_loop()
        # By number: given the socket, asyncio formats its repr (two system calls)
        # for a KeyError it catches, on every new connection.
        self.fd = sock.fileno()
        self.loop.add_reader(self.fd, self._read)
        self.timer = self.loop.call_later(deadline, self._expire)

    def _read(self):
        try:
            data = self.sock.recv(MAX_HEADER_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # tornado's own read meets the error and closes
        seen = len(self.buf)
        self.buf += data
        if data and len(self.buf) < MAX_HEADER_BYTES \
                and not _HEAD_END.search(self.buf, max(0, seen - 3)):
            return
        self._stop()
        self.then(self.sock, self.address, self.buf)

    def _expire(self):
        self._stop()
        self.expired(self.sock)

    def _stop(self):
        self.loop.remove_reader(self.fd)
        self.timer.cancel()


class _Adapter(HTTPMessageDelegate):
    """tornado's own adapter (a request's body gathered in memory, then the
    container called), except for a PUT to a storage upload URL: its body (up to
    PART_MAX, above the app's 1 MiB limit) is spooled to a file as it arrives, so
    no part is ever whole in memory; with `spool_dir`, a named file in the
    directory it returns."""

    def __init__(self, callback, connection, spool_dir=None):
        self.callback, self.connection, self.spool_dir = callback, connection, spool_dir
        self.request, self.spool, self.size = None, None, 0
        self.chunks = bytearray()

    def headers_received(self, start_line, headers):
        self.request = HTTPServerRequest(connection=self.connection, start_line=start_line,
                                         headers=headers)
        if start_line.method == "PUT" and start_line.path.startswith(STORAGE_PATH):
            self.connection.set_max_body_size(PART_MAX + BODY_HEADROOM)
            self._reads(BODY_CHUNK)
            where = self.spool_dir() if self.spool_dir else None
            self.spool = (tempfile.NamedTemporaryFile(dir=where, prefix=".spool-", delete=False)
                          if where else tempfile.SpooledTemporaryFile(SPOOL_IN_MEMORY))

    def data_received(self, chunk):
        if self.spool is None:
            self.chunks += chunk
        else:
            self.spool.write(chunk)
            self.size += len(chunk)

    def _reads(self, size):
        stream = getattr(self.connection, "stream", None)
        if stream is not None:
            stream.read_chunk_size = size

    def finish(self):
        self._reads(READ_CHUNK)  # the connection's next request starts small again
        if self.spool is None:
            self.request.body = bytes(self.chunks)
        else:
            self.spool.seek(0)
            self.request.spool, self.request.spool_size = self.spool, self.size
            self.spool = None  # the container closes it
        self.callback(self.request)

    def on_connection_close(self):
        self.chunks = None
        if self.spool is not None:
            _discard_spool(self.spool)


class _Switch(HTTPMessageDelegate):
    """A request to the app (`adapter`), or, once its head says it is a shell
    session's WebSocket (`wants`), to tornado's own handler of it (`socket`)."""

    def __init__(self, adapter, socket, wants):
        self.inner, self.socket, self.wants = adapter, socket, wants

    def headers_received(self, start_line, headers):
        if self.wants(start_line, headers):
            self.inner = self.socket()
        return self.inner.headers_received(start_line, headers)

    def data_received(self, chunk):
        return self.inner.data_received(chunk)

    def finish(self):
        return self.inner.finish()

    def on_connection_close(self):
        return self.inner.on_connection_close()


# tornado answers a malformed request with these literal bytes, written from inside
# HTTP1Connection._read_message_inner (no hook), and closes a connection whose
# headers outgrow max_header_size without a word. The API promises JSON error
# bodies: the stream's write swaps the one, its close adds the other.
# tests/control_plane/test_http_server.py fails if a tornado upgrade changes this.
_TORNADO_400 = b"HTTP/1.1 400 Bad Request\r\n\r\n"
_TOO_LARGE = ("Content-Length too long", "chunked body too large", "Body too long")


def _answer_errors_in_json(stream):
    write, close = stream.write, stream.close
    answered = False

    def json_write(data):
        nonlocal answered
        if data == _TORNADO_400:
            # Called in tornado's `except HTTPInputError` block: that error says why.
            reason = str(sys.exc_info()[1] or "malformed request")
            data = (_answer(413, "The request body is too large.")
                    if reason.startswith(_TOO_LARGE)
                    else _answer(400, f"Malformed HTTP request: {reason[:200]}"))
            answered = True
        return write(data)

    def json_close(exc_info=False):
        if stream.closed():
            return close(exc_info)
        if isinstance(exc_info, UnsatisfiableReadError):  # headers past MAX_HEADER_BYTES
            try:
                stream.socket.send(_answer(400, "The request headers exceed "
                                           f"{MAX_HEADER_BYTES} bytes."))
            except OSError:
                pass
        elif not answered:
            return close(exc_info)
        _linger(stream.socket)
        return close(exc_info)

    stream.write, stream.close = json_write, json_close


def _answer(status, message):
    body = json.dumps({"error": HTTP_CODES[status], "message": message}).encode()
    reason = {400: "Bad Request", 413: "Content Too Large"}[status]
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def _linger(sock):
    """Close after an error answer without losing it: closing a socket with unread
    input makes the kernel send a reset, which can destroy the answer before the
    client reads it. Shut our side, drain what the client still sends (bounded),
    then close; a duplicate descriptor keeps the socket open past tornado's close."""
    try:
        dup = sock.dup()
        dup.shutdown(socket.SHUT_WR)
    except OSError:
        return
    loop = asyncio.get_running_loop()
    left = [LINGER_BYTES]

    def done():
        loop.remove_reader(dup)
        dup.close()

    def drain():
        try:
            data = dup.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        left[0] -= len(data)
        if not data or left[0] <= 0:
            timer.cancel()
            done()

    loop.add_reader(dup, drain)
    timer = loop.call_later(LINGER_SECONDS, done)


def _connection_cap(wanted, beside=0):
    """Raise the soft descriptor limit toward the hard one; the connection cap is
    what fits under it with FD_RESERVE, and `beside` for others, to spare."""
    spare = FD_RESERVE + beside
    soft = raise_fd_limit(wanted + spare)
    if soft == resource.RLIM_INFINITY or soft >= wanted + spare:
        return wanted
    # Short of descriptors, HTTP keeps at least half of what is left after the reserve.
    cap = max(1, soft - spare, (soft - FD_RESERVE) // 2)
    print(f"berth: at most {cap} HTTP connections (open file limit {soft})",
          file=sys.stderr, flush=True)
    return cap


def raise_fd_limit(need):
    """The soft open-file limit raised toward `need` (at most the hard one); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    return soft


def _fmt(host):
    return f"[{host}]" if ":" in host else host
