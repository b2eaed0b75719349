"""A redirect never carries the API key to another origin (scheme, host or port):
the real `berthctl` against real HTTP(S) servers on loopback, the first answering
a redirect, the second recording the headers it is sent."""

import http.server
import json
import threading

import pytest

from tests.berthctl.conftest import berthctl, clean_env, no_traceback
from tests.support.webhook_receiver import https_receiver  # noqa: F401 a fixture

KEY = "svc_live_ro_redirect-test-key"
EMPTY_PAGE = {"data": [], "pagination": {"next_cursor": None, "has_more": False}}


class Plain:
    """A plain HTTP server on loopback: records each request's Host, path and
    Authorization; answers a redirect to `location(path)` when it returns one,
    else an empty page of the API."""

    def __init__(self, location=lambda path: None, status=302):
        self.seen, self.location, self.status = [], location, status
        plain = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                plain.seen.append((self.headers.get("Host"), self.path,
                                   self.headers.get("Authorization")))
                target = plain.location(self.path)
                body = b"" if target else json.dumps(EMPTY_PAGE).encode()
                self.send_response(plain.status if target else 200)
                if target:
                    self.send_header("Location", target)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def keys_seen(self, host=None):
        return [auth for h, _, auth in self.seen if host is None or h == host]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers():
    made = []

    def make(*args, **kwargs):
        made.append(Plain(*args, **kwargs))
        return made[-1]
    yield make
    for s in made:
        s.close()


def run(url, *args, tmp_path, **env):
    return berthctl(*args, env=clean_env(tmp_path, BERTH_URL=url, BERTH_API_KEY=KEY, **env),
                    timeout=60)


def refused(r, target):
    """Not followed: a clear error naming where it was sent, no traceback."""
    assert r.returncode == 5, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert "redirected to" in r.stderr and target in r.stderr, r.stderr
    assert r.stderr.startswith("berthctl: error: ") and r.stderr.count("\n") == 1, r.stderr
    no_traceback(r)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_to_another_port_does_not_get_the_key(servers, tmp_path, status):
    other = servers()
    first = servers(lambda path: other.url + path, status)
    r = run(first.url, "projects", "list", tmp_path=tmp_path)
    assert first.keys_seen() == [f"Bearer {KEY}"]
    assert not any(KEY in (auth or "") for auth in other.keys_seen())
    refused(r, other.url)


def test_a_post_redirected_to_another_port_does_not_get_the_key(servers, tmp_path):
    other = servers()
    first = servers(lambda path: other.url + path, 303)
    r = run(first.url, "envs", "restart", "00000000-0000-0000-0000-000000000001",
            tmp_path=tmp_path)
    assert not any(KEY in (auth or "") for auth in other.keys_seen())
    refused(r, other.url)


def test_a_redirect_to_another_host_name_does_not_get_the_key(servers, tmp_path):
    """Same server and port, named `localhost` instead of 127.0.0.1: another origin."""
    first = servers()
    first.location = lambda path: (None if path.startswith("/moved")
                                   else f"http://localhost:{first.port}/moved{path}")
    r = run(first.url, "projects", "list", tmp_path=tmp_path)
    assert not any(KEY in (auth or "") for auth in
                   first.keys_seen(host=f"localhost:{first.port}"))
    refused(r, f"http://localhost:{first.port}")


def test_https_redirected_to_http_does_not_get_the_key(servers, https_receiver, tmp_path):  # noqa: F811
    plain = servers()
    https_receiver.redirect(plain.url + "/api/public/v1/projects", 302)
    r = run(https_receiver.url, "projects", "list", tmp_path=tmp_path,
            SSL_CERT_FILE=https_receiver.ca_path)
    assert [q.headers.get("Authorization") for q in https_receiver.requests] == \
        [f"Bearer {KEY}"]  # TLS was trusted: the key went to the https origin only
    assert not any(KEY in (auth or "") for auth in plain.keys_seen())
    refused(r, plain.url)


def test_a_redirect_on_the_same_origin_is_followed_with_the_key(servers, tmp_path):
    first = servers()
    first.location = lambda path: None if path.startswith("/moved") else "/moved" + path
    r = run(first.url, "--output", "json", "projects", "list", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
    assert [path.split("?")[0] for _, path, _ in first.seen] == [
        "/api/public/v1/projects", "/moved/api/public/v1/projects"]
    assert first.keys_seen() == [f"Bearer {KEY}"] * 2
