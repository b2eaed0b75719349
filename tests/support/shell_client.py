"""A shell session's client for tests: the POST that opens it, then its WebSocket
(control_plane/shell_socket.py's protocol), read with a deadline."""

import asyncio
import json
import threading
import time

import requests
from websockets.sync.client import connect

from control_plane import http_server
from tests.support.services import free_port
from tests.support.waiting import wait_for

INPUT, OUTPUT, ERROR = 0, 1, 2


class Shell:
    def __init__(self, base_url, opened, rows=24, cols=80, ticket=None):
        self.opened = opened
        self.out, self.err = bytearray(), bytearray()
        self.messages = []  # the server's JSON messages
        self.exit_code = self.error = None
        self.ws = connect(base_url.replace("http", "ws", 1) + opened["stream_path"],
                          open_timeout=10, max_size=None)
        self.ws.send(json.dumps({"ticket": ticket or opened["ticket"], "rows": rows,
                                 "cols": cols}))

    def send(self, data):
        self.ws.send(bytes([INPUT]) + (data.encode() if isinstance(data, str) else data))

    def control(self, **message):
        self.ws.send(json.dumps(message))

    def _one(self, timeout):
        message = self.ws.recv(timeout=timeout)
        if isinstance(message, bytes):
            (self.err if message[0] == ERROR else self.out).extend(message[1:])
            return
        said = json.loads(message)
        self.messages.append(said)
        if said["type"] == "exit":
            self.exit_code = said["exit_code"]
        elif said["type"] == "error":
            self.error = said

    def read_until(self, check, timeout=30):
        deadline = time.monotonic() + timeout
        while not check(self):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"not seen in {timeout} s: out={bytes(self.out)!r} "
                                     f"messages={self.messages}")
            self._one(left)
        return self

    def output_has(self, text, timeout=30):
        return self.read_until(lambda s: text.encode() in s.out, timeout)

    def ended(self, timeout=60):
        """Everything until the server closes the socket."""
        from websockets.exceptions import ConnectionClosed

        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the session did not end: {self.messages}")
                self._one(left)
        except ConnectionClosed:
            return self

    def close(self):
        self.ws.close()


def sessions_carried(base_url):
    """The server's shell sessions by how the agents carried their bytes
    (`berth_shell_sessions_total` on /metrics): {"socket": n, "stream": n}."""
    from prometheus_client.parser import text_string_to_metric_families

    counts = {"socket": 0, "stream": 0}
    text = requests.get(f"{base_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        if family.name == "berth_shell_sessions":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["via"]] = int(sample.value)
    return counts


def open_shell(base_url, headers, env_id, **body):
    """(the POST's response, the Shell or None when it was refused)."""
    r = requests.post(f"{base_url}/api/public/v1/environments/{env_id}/shell-sessions",
                      headers=headers, json=body, timeout=30)
    return r, (Shell(base_url, r.json()) if r.status_code == 201 else None)


def serve_app(app):
    """`app` on the real HTTP server (its WebSockets included) in a daemon thread, as
    its PUBLIC_URL; the server lives as long as the test process."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    app.config["PUBLIC_URL"] = url
    threading.Thread(target=asyncio.run, args=(http_server._serve(app, "127.0.0.1", port),),
                     daemon=True).start()
    wait_for(lambda: _answers(url), timeout=15, what="the HTTP server")
    return url


def _answers(url):
    try:
        return requests.get(url + "/healthz", timeout=2).ok
    except requests.ConnectionError:
        return False
