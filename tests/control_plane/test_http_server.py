"""The HTTP server under `berth serve`, over real loopback sockets: slow clients
cannot starve it, read deadlines cut them off, and every malformed request
still gets the spec's JSON error body."""

import json
import socket
import threading
import time

import pytest
import requests

from tests.support.agents import wait_for
from tests.support.serve import Served

P = "/api/public/v1"
pytestmark = pytest.mark.slow


def _serve(tmp_path, **env):
    s = Served(tmp_path / "data", {f"CP_{k}": str(v) for k, v in env.items()})
    s.boot = s.admin("bootstrap")
    s.start()
    s.host, s.port = s.url.removeprefix("http://").rsplit(":", 1)
    return s


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = _serve(tmp_path_factory.mktemp("served"))
    yield s
    s.stop()


@pytest.fixture
def short_deadlines(tmp_path):
    s = _serve(tmp_path, HTTP_HEADER_TIMEOUT=2, HTTP_BODY_TIMEOUT=2)
    yield s
    s.stop()


def _connect(s, timeout=5):
    return socket.create_connection((s.host, int(s.port)), timeout=timeout)


def _raw(s, data, timeout=10):
    """Send raw bytes; return (status, headers, body) of the answer, read to EOF."""
    with _connect(s, timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _closed_by_peer(sock):
    """True once the server has closed this socket (EOF or reset), without blocking."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def _refused(s):
    try:
        _connect(s, timeout=2).close()
    except OSError:
        return True
    return False


class Tricklers:
    """n connections that send a request line and one header line, then one more
    header byte every `every` seconds, never finishing their headers."""

    def __init__(self, s, n, every=1.0):
        self.socks = []
        for _ in range(n):
            sock = _connect(s)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            self.socks.append(sock)
        self.every, self.stop = every, threading.Event()
        self.rounds = 0  # of a byte on every connection
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.wait(self.every):
            for sock in self.socks:
                try:
                    sock.send(b"a")
                except OSError:
                    pass
            self.rounds += 1

    def still_open(self):
        return sum(not _closed_by_peer(sock) for sock in self.socks)

    def close(self):
        self.stop.set()
        self.thread.join(5)
        for sock in self.socks:
            sock.close()


def _legitimate_requests(s):
    """(path, status, seconds) for each surface: health, public API, installer,
    Git push webhook (unsigned: 401, answered)."""
    key = {"Authorization": f"Bearer {s.boot['key']}"}
    calls = [("GET", "/healthz", {}, 200), ("GET", P + "/projects", key, 200),
             ("GET", "/install.sh", {}, 200), ("POST", "/api/v1/webhooks/github", {}, 401)]
    out = []
    for method, path, headers, expected in calls:
        t = time.monotonic()
        r = requests.request(method, s.url + path, headers=headers, data=b"{}", timeout=10)
        out.append((path, r.status_code, expected, time.monotonic() - t))
    return out


def test_three_hundred_trickling_connections_do_not_starve_legitimate_requests(served):
    tricklers = Tricklers(served, 300)
    try:
        wait_for(lambda: tricklers.rounds >= 1, timeout=5, what="a trickle byte sent on each")
        for _ in range(3):
            for path, status, expected, seconds in _legitimate_requests(served):
                assert status == expected, path
                assert seconds < 2.5, (path, seconds)  # starved, it would be the 10 s timeout
        # The pressure was real: the slow connections were held all along.
        assert tricklers.still_open() >= 295
    finally:
        tricklers.close()


def test_a_trickler_is_cut_at_the_header_deadline(short_deadlines):
    tricklers = Tricklers(short_deadlines, 5, every=0.2)
    try:
        start = time.monotonic()
        wait_for(lambda: tricklers.still_open() == 0, timeout=8, interval=0.1,
                 what="every trickler cut")
        assert 1.5 < time.monotonic() - start < 6  # the total deadline, however slow the drip
    finally:
        tricklers.close()


def test_a_slow_body_is_cut_at_the_body_deadline(short_deadlines):
    with _connect(short_deadlines) as sock:
        sock.sendall(b"POST /api/v1/webhooks/github HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 100\r\n\r\n")
        def cut():  # else one more byte of the body
            if _closed_by_peer(sock):
                return True
            try:
                sock.send(b"a")
            except OSError:
                return True
            return False

        start = time.monotonic()
        wait_for(cut, timeout=8, interval=0.2, what="the slow body cut")
        assert 1.5 < time.monotonic() - start < 6


def test_connections_beyond_the_cap_are_closed_at_once(tmp_path):
    s = _serve(tmp_path, HTTP_MAX_CONNECTIONS=20)
    held = Tricklers(s, 30)
    try:
        wait_for(lambda: held.still_open() <= 20, timeout=2, interval=0.05,
                 what="the ten over the cap closed at once")
        assert held.still_open() >= 15  # and those under it held
    finally:
        held.close()
    # Their slots free as the server sees them closed: it answers again.
    wait_for(lambda: _healthz(s.url) == 200, timeout=10, what="an answer after the cap")
    s.stop()


def _healthz(url):
    try:
        return requests.get(url + "/healthz", timeout=5).status_code
    except requests.ConnectionError:
        return None


def _assert_json_error(status, headers, body, expected_status, code):
    assert status == expected_status, body
    assert headers["content-type"].startswith("application/json"), headers
    assert int(headers["content-length"]) == len(body)
    doc = json.loads(body)
    assert doc["error"] == code and isinstance(doc["message"], str) and doc["message"], doc


REQ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"


@pytest.mark.parametrize("raw", [
    REQ + b"X-A: a\x00b\r\n\r\n",            # NUL in a header value
    REQ + b"X-A: a\rb\r\n\r\n",              # bare CR in a header value
    REQ + b"X-A\r\n\r\n",                    # header line without a colon
    REQ + b"X A: b\r\n\r\n",                 # space in a header name
    REQ + b"X-A: " + b"a" * 100_000 + b"\r\n\r\n",  # over-long header
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
], ids=["nul", "bare-cr", "no-colon", "space-in-name", "too-long", "bad-length",
        "two-lengths", "bad-chunk"])
def test_malformed_requests_get_a_json_400(served, raw):
    status, headers, body = _raw(served, raw)
    _assert_json_error(status, headers, body, 400, "bad_request")
    assert headers["connection"].lower() == "close"


def test_bare_lf_line_endings_get_json(served):
    status, headers, body = _raw(served, b"GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n")
    assert headers["content-type"].startswith("application/json")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    # A bare LF inside what should be one CRLF line is a line break, not part of a value.
    status, headers, body = _raw(served, REQ + b"X-A: a\nb\r\n\r\n")
    _assert_json_error(status, headers, body, 400, "bad_request")


def test_oversized_bodies_get_the_json_413(served):
    key = f"Authorization: Bearer {served.boot['key']}\r\n".encode()
    post = b"POST " + P.encode() + b"/projects HTTP/1.1\r\nHost: x\r\n" + key
    # Announced far too large: refused before any of it is read.
    status, headers, body = _raw(served, post + b"Content-Length: 50000000\r\n\r\n")
    _assert_json_error(status, headers, body, 413, "payload_too_large")
    # Just over the API's 1 MiB limit, sent in full: the application's answer.
    r = requests.post(served.url + P + "/projects", data=b"x" * (1024 * 1024 + 1),
                      headers={"Authorization": f"Bearer {served.boot['key']}",
                               "Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"
    # Chunked, growing past any limit.
    chunk = b"100000\r\n" + b"x" * 0x100000 + b"\r\n"
    raw = post + b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
    with _connect(served) as sock:
        sock.sendall(raw)
        try:
            for _ in range(4):
                sock.sendall(chunk)
        except OSError:
            pass  # cut off while sending: the answer is already waiting
        data = b""
        while True:
            try:
                part = sock.recv(65536)
            except ConnectionResetError:
                break
            if not part:
                break
            data += part
    assert data.startswith(b"HTTP/1.1 413"), data[:200]
    assert json.loads(data.partition(b"\r\n\r\n")[2])["error"] == "payload_too_large"


@pytest.mark.parametrize("path", ["/api//public/v1/projects", "/api/public/v1//projects",
                                  "/api/public//v1/projects", "/api/v1//webhooks/github"])
def test_doubled_slashes_get_json(served, path):
    status, headers, body = _raw(served, f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: "
                                         f"Bearer {served.boot['key']}\r\nConnection: close"
                                         "\r\n\r\n".encode())
    _assert_json_error(status, headers, body, 404, "not_found")


def test_head_and_chunked_request_bodies(served):
    """WSGI details the app relies on survive the server: HEAD has no body, a chunked
    request body reaches the app."""
    r = requests.head(served.url + "/install.sh", timeout=10)
    assert r.status_code == 200 and r.content == b""
    assert int(r.headers["Content-Length"]) > 0
    r = requests.post(served.url + "/api/v1/webhooks/github",
                      data=iter([b'{"zen":', b' "x"}']), timeout=10)  # chunked
    assert r.status_code == 401 and r.json()["error"] == "missing_signature"


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_server_cleanly(tmp_path, signal_name):
    """Stop accepting, close idle and slow connections, exit 0 (the scheduler is
    stopped on the way out), even with a client still sending its headers."""
    import signal

    s = _serve(tmp_path)
    tricklers = Tricklers(s, 3)
    try:
        s.proc.send_signal(getattr(signal, signal_name))
        assert s.proc.wait(15) == 0
        assert tricklers.still_open() == 0
    finally:
        tricklers.close()
    log = s.stop()
    assert "server.py" not in log and "tornado" not in log  # no error from the HTTP side


def test_a_large_answer_is_sent_whole_in_pieces(tmp_path):
    """Answers past the one-trip size (the agent wheelhouse) stream out chunk by
    chunk; the client gets every byte, in order, with the announced length."""
    import hashlib
    import os

    data = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wheelhouse.tar").write_bytes(data)
    s = _serve(tmp_path)
    try:
        with requests.get(s.url + "/agent/wheelhouse.tar", stream=True, timeout=30) as r:
            assert r.status_code == 200
            assert int(r.headers["Content-Length"]) == len(data)
            digest, pieces = hashlib.sha256(), 0
            for piece in r.iter_content(64 * 1024):
                digest.update(piece)
                pieces += 1
        assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
        assert requests.get(s.url + "/healthz", timeout=5).json() == {"status": "ok"}
    finally:
        s.stop()


def test_a_signal_lets_the_request_in_flight_finish(tmp_path):
    """SIGTERM while an answer is still going out (32 MB, more than the socket buffers
    hold, read slowly): no new connection is taken, the answer arrives whole, then the
    process exits 0."""
    import hashlib
    import os
    import signal

    data = os.urandom(32 * 1024 * 1024)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wheelhouse.tar").write_bytes(data)
    s = _serve(tmp_path)
    try:
        with requests.get(s.url + "/agent/wheelhouse.tar", stream=True, timeout=30) as r:
            pieces = r.iter_content(256 * 1024)
            digest = hashlib.sha256(next(pieces))
            s.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: _refused(s), timeout=10, what="new connections refused")
            assert s.proc.poll() is None  # still answering
            with pytest.raises(OSError):  # taking no one new
                _connect(s, timeout=2).close()
            for piece in pieces:
                digest.update(piece)
        assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
        assert s.proc.wait(15) == 0
    finally:
        s.stop()


def _answers(sock):
    """Every answer on `sock` up to EOF, as (status, body) pairs (Content-Length framed)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    out = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(v) for k, _, v in (h.partition(":") for h in lines[1:])
                      if k.strip().lower() == "content-length")
        out.append((int(lines[0].split()[1]), data[:length]))
        data = data[length:]
    return out


def test_a_head_sent_in_pieces_and_pipelined_requests_are_answered(served):
    """The first head on a connection is read before tornado takes the connection
    over: a head that arrives a few bytes at a time is answered, the body bytes
    that came with its end reach the app, and a request behind it is answered too."""
    body = json.dumps({"name": "in pieces", "server_id": "srv_missing"}).encode()
    head = (f"POST {P}/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            f"{served.boot['key']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n").encode()
    with _connect(served) as sock:
        for i in range(0, len(head), 7):
            sock.sendall(head[i:i + 7])
            time.sleep(0.01)
        sock.sendall(b"\r\n" + body + b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                     b"Connection: close\r\n\r\n")
        (status, first), (second_status, second) = _answers(sock)
    # The app read the whole body: it names the one field in it that is wrong.
    assert status == 422 and list(json.loads(first)["details"]["json"]) == ["server_id"], first
    assert (second_status, json.loads(second)) == (200, {"status": "ok"})


def test_connections_cut_at_the_header_deadline_free_their_places(tmp_path):
    """Under the connection cap, clients that never finish a head are cut at the
    deadline and their places go to new connections."""
    s = _serve(tmp_path, HTTP_MAX_CONNECTIONS=5, HTTP_HEADER_TIMEOUT=2)
    silent = [_connect(s) for _ in range(5)]
    try:
        for sock in silent:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        wait_for(lambda: all(_closed_by_peer(sock) for sock in silent), timeout=8,
                 interval=0.1, what="the five cut at the header deadline")
        for _ in range(10):  # more than the cap, one after another
            assert _healthz(s.url) == 200
    finally:
        for sock in silent:
            sock.close()
        s.stop()
