"""Login, precedence of the environment, errors and their exit codes: the real
`berthctl` against the real `berth serve` (no agent needed)."""

import http.server
import json
import stat
import threading
import uuid

import pytest
import requests

from tests.berthctl.conftest import berthctl, clean_env, no_traceback
from tests.support.services import free_port

P = "/api/public/v1"


def config_file(tmp_path):
    return tmp_path / "xdg" / "berth" / "berthctl.json"


def test_login_stores_the_key_readable_by_its_owner_only(served, tmp_path):
    env = clean_env(tmp_path)
    key = served.keys["full_access"]
    r = berthctl("login", "--url", served.url, env=env, input=key + "\n")
    assert r.returncode == 0, r.stderr
    path = config_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"url": served.url, "api_key": key}
    assert key not in r.stdout + r.stderr  # never echoed

    # The stored login is what later commands use.
    listed = berthctl("--output", "json", "projects", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []


def test_login_refuses_a_key_on_the_command_line(served, tmp_path):
    env = clean_env(tmp_path)
    key = served.keys["full_access"]
    for args in (["login", "--url", served.url, key], ["login", "--url", served.url,
                                                       "--api-key", key]):
        r = berthctl(*args, env=env, input="")
        assert r.returncode == 2, (args, r.stderr)
        assert "never from the command line" in r.stderr
        assert key not in r.stderr + r.stdout
        no_traceback(r)
    assert not config_file(tmp_path).exists()


def test_login_with_a_wrong_key_stores_nothing(served, tmp_path):
    env = clean_env(tmp_path)
    r = berthctl("login", "--url", served.url, env=env, input="svc_live_rw_not-a-key\n")
    assert r.returncode == 3, r.stderr
    assert "[HTTP 401]" in r.stderr
    no_traceback(r)
    assert not config_file(tmp_path).exists()


def test_berth_config_chooses_the_file(served, tmp_path):
    target = tmp_path / "elsewhere" / "cli.json"
    env = clean_env(tmp_path, BERTH_CONFIG=str(target))
    r = berthctl("login", "--url", served.url, env=env, input=served.keys["read_only"] + "\n")
    assert r.returncode == 0, r.stderr
    assert json.loads(target.read_text())["api_key"] == served.keys["read_only"]
    assert not config_file(tmp_path).exists()


def test_environment_variables_take_precedence_over_the_stored_login(served, tmp_path):
    env = clean_env(tmp_path)
    assert berthctl("login", "--url", served.url, env=env,
                    input=served.keys["read_only"] + "\n").returncode == 0
    assert berthctl("projects", "list", env=env).returncode == 0

    # A key from the environment replaces the stored one (this one is refused: 401).
    r = berthctl("projects", "list", env={**env, "BERTH_API_KEY": "svc_live_ro_revoked"})
    assert r.returncode == 3, r.stderr
    assert "invalid" in r.stderr.lower() or "401" in r.stderr

    # A URL from the environment replaces the stored one; the stored key is not sent there.
    dead = f"http://127.0.0.1:{free_port()}"
    r = berthctl("projects", "list", env={**env, "BERTH_URL": dead})
    assert r.returncode == 3, r.stderr
    assert "Not logged in" in r.stderr
    r = berthctl("projects", "list", env={**env, "BERTH_URL": dead,
                                          "BERTH_API_KEY": served.keys["read_only"]})
    assert r.returncode == 5, r.stderr
    assert f"Cannot reach {dead}" in r.stderr

    # Without a stored login, the environment alone is enough (scripts and CI).
    bare = clean_env(tmp_path / "other", BERTH_URL=served.url,
                     BERTH_API_KEY=served.keys["read_only"])
    r = berthctl("--output", "json", "projects", "list", env=bare)
    assert r.returncode == 0, r.stderr


def test_an_api_error_prints_its_message_and_code(served, tmp_path):
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.keys["read_only"])
    missing = str(uuid.uuid4())
    body = requests.get(f"{served.url}{P}/environments/{missing}", timeout=10, headers={
        "Authorization": f"Bearer {served.keys['read_only']}"}).json()
    r = berthctl("envs", "show", missing, env=env)
    assert r.returncode == 4
    assert r.stdout == ""
    assert r.stderr == f"berthctl: error: {body['message']} ({body['error']}) [HTTP 404]\n"

    # A read-only key on a write: the spec's 403.
    r = berthctl("envs", "restart", missing, env=env)
    assert r.returncode == 3, r.stderr
    assert "[HTTP 403]" in r.stderr
    no_traceback(r)

    # A project that exists nowhere: 404 on its environments too.
    r = berthctl("--output", "json", "envs", "list", "--project", missing, env=env)
    assert r.returncode == 4
    no_traceback(r)


@pytest.mark.parametrize("command", [
    ("envs", "show", "../projects"), ("envs", "status", "x/../../projects"),
    ("backups", "list", "%2e%2e"), ("rules", "show", "../servers"),
    ("envs", "list", "--project", "../../projects"), ("metrics", "--server", "a?b"),
    ("envs", "rollback", str(uuid.uuid4()), "--to", "../x")])
def test_an_id_that_is_no_uuid_is_a_usage_error_before_any_request(served, tmp_path, command):
    """An id goes into the request's path: one that is no UUID could name another
    resource (`../projects`), so it is refused before any request."""
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.keys["read_only"])
    r = berthctl(*command, env=env)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)  # usage: before any request
    assert "is not a valid UUID" in r.stderr and r.stdout == ""
    no_traceback(r)


def test_json_output_parses(served, tmp_path):
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.keys["read_only"])
    r = berthctl("--output", "json", "audit", "--limit", "5", "--since", "1h", env=env)
    assert r.returncode == 0, r.stderr
    events = json.loads(r.stdout)
    assert isinstance(events, list) and len(events) <= 5
    assert {"api_key.create", "organization.create"} <= {e["action"] for e in events}
    r = berthctl("--output", "json", "audit", "--action", "api_key.create",
                 "--target", "api_key", env=env)
    assert r.returncode == 0, r.stderr
    assert [e["action"] for e in json.loads(r.stdout)] == ["api_key.create"] * 2
    r = berthctl("audit", "--since", "yesterday", env=env)
    assert r.returncode == 2
    assert "--since" in r.stderr


def test_nothing_listening_is_a_clear_network_error(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    r = berthctl("projects", "list", env=clean_env(tmp_path, BERTH_URL=url,
                                                     BERTH_API_KEY="svc_live_ro_x"))
    assert r.returncode == 5
    assert r.stderr == f"berthctl: error: Cannot reach {url}: Connection refused\n"


@pytest.fixture
def not_berth():
    """An HTTP server answering HTML to everything: a wrong URL, a captive portal."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_an_answer_that_is_not_json_is_reported(not_berth, tmp_path):
    r = berthctl("projects", "list", env=clean_env(tmp_path, BERTH_URL=not_berth,
                                                     BERTH_API_KEY="svc_live_ro_x"))
    assert r.returncode == 5
    assert "did not answer with JSON" in r.stderr
    no_traceback(r)


def test_version_usage_and_completion(tmp_path):
    env = clean_env(tmp_path)
    r = berthctl("--version", env=env)
    assert r.returncode == 0 and r.stdout.startswith("berthctl, version ")
    r = berthctl("envs", "frobnicate", env=env)
    assert r.returncode == 2 and "No such command" in r.stderr
    for shell in ("bash", "zsh", "fish"):
        r = berthctl("completion", shell, env=env)
        assert r.returncode == 0 and "_BERTHCTL_COMPLETE" in r.stdout, shell


def test_destroy_without_a_terminal_needs_yes(served, tmp_path):
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.keys["full_access"])
    r = berthctl("envs", "destroy", str(uuid.uuid4()), env=env, input="y\n")
    assert r.returncode == 2
    assert "--yes" in r.stderr
    # With --yes it is asked of the API (which knows no such environment).
    r = berthctl("envs", "destroy", str(uuid.uuid4()), "--yes", env=env)
    assert r.returncode == 4, r.stderr


@pytest.mark.slow  # it waits out a real minute's window
def test_a_rate_limited_read_is_waited_out(served, tmp_path):
    """A full-access key allows 20 requests a minute: the 21st read waits for the
    window's Retry-After and is asked again, instead of failing."""
    key = served.admin("key", "create", "--org", served.org, "--name", "burst", "--type",
                       "full_access", "--scope", "organization")["key"]
    headers = {"Authorization": f"Bearer {key}"}
    statuses = [requests.get(f"{served.url}{P}/projects", headers=headers, timeout=10)
                .status_code for _ in range(21)]
    assert statuses[-1] == 429, statuses
    r = berthctl("--output", "json", "projects", "list", env=clean_env(
        tmp_path, BERTH_URL=served.url, BERTH_API_KEY=key), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "rate limited, retrying in" in r.stderr
    assert json.loads(r.stdout) == []


@pytest.mark.parametrize("args", [(), (str(uuid.uuid4()), "--at", "2026-12-01T09:41:00Z"),
                                  ("--from", str(uuid.uuid4()), str(uuid.uuid4()))])
def test_a_restore_names_a_backup_or_a_moment(served, tmp_path, args):
    """`backups restore ENV_ID BACKUP_ID`, or `--at TIME` (with `--from`): one of the
    two, refused before any request otherwise."""
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_USER_TOKEN="not-used")
    r = berthctl("backups", "restore", str(uuid.uuid4()), *args, env=env)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "BACKUP_ID or --at" in r.stderr or "--from goes with --at" in r.stderr
    no_traceback(r)
