"""What berthctl prints: `--output/-o table|json` at every level of the command
line, and text from the API shown with its control characters as escapes (a
terminal acts on them), while JSON output stays the API's JSON."""

import http.server
import json
import re
import threading

import pytest
import requests
from click.testing import CliRunner

from berthctl.cli import cli
from tests.berthctl.conftest import berthctl, clean_env, no_traceback

P = "/api/public/v1"
# A title change (OSC), a screen clear (CSI), the one-byte C1 CSI, a line break, DEL.
NAME = "evil\x1b]0;pwned\x07 \x1b[2J\x9b31m\r\nname\x7fX"
SHOWN = "evil\\x1b]0;pwned\\x07 \\x1b[2J\\x9b31m\\r\\nname\\x7fX"
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # every control character but \n


@pytest.fixture(scope="module")
def project(served):
    """A project named with escape sequences, created through the public API."""
    server = served.admin("server", "create", "--name", "s1", "--provider", "test",
                          "--cpu-cores", "2", "--ram-mb", "2048", "--disk-gb", "20",
                          "--org", served.org)["id"]
    r = requests.post(f"{served.url}{P}/projects", json={"name": NAME, "server_id": server},
                      headers={"Authorization": f"Bearer {served.keys['full_access']}"},
                      timeout=10)
    assert r.status_code == 201, r.text
    assert r.json()["name"] == NAME
    return r.json()


def reader(served, tmp_path):
    return clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.keys["read_only"])


def test_a_table_shows_control_characters_as_escapes(served, project, tmp_path):
    r = berthctl("projects", "list", env=reader(served, tmp_path))
    assert r.returncode == 0, r.stderr
    assert not CONTROL.search(r.stdout), repr(r.stdout)
    header, row = r.stdout.splitlines()  # the line break in the name breaks no row
    assert row.startswith(f"{project['id']}  {SHOWN}  -  ")
    assert header.index("ERP") == len(f"{project['id']}  {SHOWN}  ")  # columns aligned


def test_json_output_holds_the_name_exactly_and_escaped(served, project, tmp_path):
    r = berthctl("--output", "json", "projects", "list", env=reader(served, tmp_path))
    assert r.returncode == 0, r.stderr
    assert not CONTROL.search(r.stdout), repr(r.stdout)
    assert [p["name"] for p in json.loads(r.stdout)] == [NAME]


@pytest.fixture
def hostile():
    """An HTTP server whose error message holds escape sequences (a proxy, or a
    server that is not what it claims)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps({"error": "not_found\x1b[8m",
                               "message": "Gone\x1b]0;pwned\x07\x9b2J"}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_an_error_message_is_shown_with_escapes(hostile, tmp_path):
    r = berthctl("envs", "show", "00000000-0000-4000-8000-000000000000",
                 env=clean_env(tmp_path, BERTH_URL=hostile, BERTH_API_KEY="svc_live_ro_x"))
    assert r.returncode == 4
    assert r.stderr == ("berthctl: error: Gone\\x1b]0;pwned\\x07\\x9b2J "
                        "(not_found\\x1b[8m) [HTTP 404]\n")
    no_traceback(r)


@pytest.mark.parametrize("args", [
    ["--output", "json", "projects", "list"],
    ["-o", "json", "projects", "list"],
    ["projects", "-o", "json", "list"],
    ["projects", "list", "--output", "json"],
    ["projects", "list", "-o", "json"],
    ["projects", "list", "--output=json"],
    ["-o", "table", "projects", "list", "-ojson"],  # the last one given wins
])
def test_output_is_accepted_before_or_after_the_command(served, project, tmp_path, args):
    r = berthctl(*args, env=reader(served, tmp_path))
    assert r.returncode == 0, r.stderr
    assert [p["id"] for p in json.loads(r.stdout)] == [project["id"]]


def test_output_after_a_command_without_subcommands(served, tmp_path):
    r = berthctl("audit", "--limit", "2", "-o", "json", env=reader(served, tmp_path))
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) == 2
    r = berthctl("-o", "json", "audit", "--limit", "1", "--output", "table",
                 env=reader(served, tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("TIME ")


def test_a_bad_output_or_key_after_the_command_is_a_clear_error(served, tmp_path):
    r = berthctl("projects", "list", "-o", "yaml", env=reader(served, tmp_path))
    assert r.returncode == 2
    assert "'yaml' is not one of 'table', 'json'" in r.stderr
    no_traceback(r)
    r = berthctl("projects", "list", "-o", "json", env=clean_env(
        tmp_path, BERTH_URL=served.url, BERTH_API_KEY="svc_live_ro_revoked"))
    assert r.returncode == 3
    assert r.stdout == "" and r.stderr.startswith("berthctl: error: ")
    assert "[HTTP 401]" in r.stderr
    no_traceback(r)


def commands(group, path=()):
    for name, command in group.commands.items():
        yield (*path, name)
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))


def test_every_command_documents_output_in_its_help():
    runner = CliRunner()
    for path in [(), *commands(cli)]:
        r = runner.invoke(cli, [*path, "--help"])
        assert r.exit_code == 0, (path, r.output)
        expected = ("--output [table|json]" if path == ("backups", "download")
                    else "-o, --output [table|json]")
        assert expected in r.output, (path, r.output)
    # `backups download` keeps its own `-o PATH`; its format is `--output`.
    r = runner.invoke(cli, ["backups", "download", "--help"])
    assert "-o, --out PATH" in r.output
