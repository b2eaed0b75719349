"""The agent's transfer client asks again for a part's or a download's URL when the
connection is reset or the control plane answers 5xx (a stale keep-alive connection,
a busy server): a backup does not fail for one dropped request. A 4xx is an answer
and is not asked again. The transfer API here is a stand-in HTTP server on loopback
that resets or fails the requests it is told to (the real one cannot be made to on
cue); the client is the agent's own."""

import json
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.backups.transfer import Transfer, TransferError


class StandIn:
    def __init__(self, script):
        self.script = list(script)  # what each transfer call gets: reset | 503 | 404 | ok
        self.calls = []
        stand = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the transfer API's calls
                self.rfile.read(int(self.headers["Content-Length"]))
                stand.calls.append(self.path)
                what = stand.script.pop(0) if stand.script else "ok"
                if what == "reset":  # RST instead of an answer
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                if what != "ok":
                    self.send_error(int(what))
                    return
                self._answer({"url": f"http://127.0.0.1:{stand.port}/put"})

            def do_PUT(self):  # noqa: N802 - the part's upload URL
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("ETag", '"etag-1"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _answer(self, body):
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def transfer(self):
        return Transfer(f"http://127.0.0.1:{self.port}/agent/v1/transfers/t1", "cred")


@pytest.fixture
def stand_in():
    made = []

    def make(script):
        made.append(StandIn(script))
        return made[-1]

    yield make
    for s in made:
        s.server.shutdown()


def test_a_reset_or_a_5xx_is_asked_again(stand_in):
    s = stand_in(["reset", "503", "ok"])
    assert s.transfer().put_part("filestore.tar.zst", 1, b"x" * 100) == "etag-1"
    assert s.calls == ["/agent/v1/transfers/t1/parts"] * 3
    s = stand_in(["reset", "ok"])
    assert s.transfer().download_url("database.dump").endswith("/put")
    assert len(s.calls) == 2


def test_a_4xx_is_an_answer_and_too_many_failures_end_it(stand_in):
    s = stand_in(["404"])
    with pytest.raises(TransferError, match="HTTP 404"):
        s.transfer().download_url("database.dump")
    assert len(s.calls) == 1
    s = stand_in(["reset", "reset", "reset"])
    with pytest.raises(TransferError, match="refused parts"):
        s.transfer().part_url("filestore.tar.zst", 1)
    assert len(s.calls) == 3
