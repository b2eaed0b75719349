"""The agent port against clients that never speak HTTP/2: a silent connection (or
one whose TLS handshake stops half-way) is closed at the documented handshake
deadline (CP_GRPC_HANDSHAKE_TIMEOUT, 10 s), and
open connections past CP_GRPC_MAX_CONNECTIONS are closed as they arrive. Raw
sockets against the gateway of a real `berth serve`."""

import socket
import time

import pytest

from control_plane.infra.config import Config
from tests.support.serve import Served
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def _dial(served):
    host, port = served.grpc.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def _closed_after(sock, limit, started=None):
    """Seconds from `started` (now) until the server closes `sock` (what it sends
    is read and dropped: its HTTP/2 settings); None if still open at `limit`."""
    started = started or time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - started < limit:
        try:
            if not sock.recv(4096):
                return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
    return None


def _greeted(sock):
    """Whether the server took the connection: it speaks first, its HTTP/2 settings
    (one it refuses is closed without a word)."""
    sock.settimeout(5)
    try:
        return bool(sock.recv(4096))
    except ConnectionResetError:
        return False


def _taken(served):
    """A new connection, if the server takes it (else None)."""
    sock = _dial(served)
    if _greeted(sock):
        return sock
    sock.close()
    return None


@pytest.fixture
def serve(tmp_path):
    started = []

    def start(**env):
        s = Served(tmp_path / f"data{len(started)}", env)
        s.admin("bootstrap")
        started.append(s.start())
        return s
    yield start
    for s in started:
        s.stop()


def test_a_silent_connection_is_closed_at_the_handshake_deadline(serve):
    served = serve()
    deadline = Config.GRPC_HANDSHAKE_TIMEOUT
    assert deadline <= 10
    started = time.monotonic()
    socks = [_dial(served) for _ in range(20)]
    try:
        took = [_closed_after(s, deadline + 3, started) for s in socks]
    finally:
        for s in socks:
            s.close()
    assert all(t is not None for t in took), took
    assert deadline - 1 <= min(took) and max(took) <= deadline + 2, took


def test_connections_past_the_bound_are_closed_at_once(serve):
    served = serve(CP_GRPC_MAX_CONNECTIONS="3", CP_GRPC_HANDSHAKE_TIMEOUT="4")
    held = [_dial(served) for _ in range(3)]
    try:
        assert all(_greeted(s) for s in held)  # accepted and counted
        extra = _dial(served)
        assert _closed_after(extra, 2) is not None  # refused at once, not at 4 s
        extra.close()
        # The held ones end at their deadline; then the port takes new ones again.
        assert all(_closed_after(s, 6) is not None for s in held)
    finally:
        for s in held:
            s.close()
    again = wait_for(lambda: _taken(served), timeout=5, interval=0.1,
                     what="a new connection taken once the held ones closed")
    try:
        assert _closed_after(again, 1) is None  # held open, as a handshake goes on
    finally:
        again.close()


def test_a_tls_handshake_left_unfinished_is_closed_at_the_deadline(serve, tmp_path):
    import trustme

    cert = trustme.CA().issue_cert("localhost")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "gw.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "gw.key"))
    served = serve(CP_GRPC_TLS_CERT=str(tmp_path / "gw.crt"),
                   CP_GRPC_TLS_KEY=str(tmp_path / "gw.key"), CP_GRPC_HANDSHAKE_TIMEOUT="3")
    started = time.monotonic()
    with _dial(served) as sock:
        sock.sendall(b"\x16\x03\x01")  # a TLS record begun, never finished
        took = _closed_after(sock, 6, started)
    assert took is not None and 2 <= took <= 5, took
