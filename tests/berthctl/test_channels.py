"""`berthctl channels` against the real `berth serve`: create (secrets from stdin
only, never shown again), list, show, update, a test message to a real HTTPS
receiver on loopback, deliveries and delete."""

import json

import pytest

from tests.berthctl.conftest import berthctl, clean_env, no_traceback
from tests.support.serve import Served
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures


@pytest.fixture
def served(tmp_path, trust_ca):  # noqa: F811
    """A server that may send to the loopback receiver and trusts its CA."""
    s = Served(tmp_path / "cp", {"CP_WEBHOOK_ALLOW_PRIVATE": "true",
                                 "CP_WEBHOOK_CA_BUNDLE": trust_ca}).start()
    s.org = s.admin("org", "create", "--name", "channels-org")["id"]
    s.key = s.admin("key", "create", "--org", s.org, "--name", "cli", "--type", "full_access",
                    "--scope", "organization")["key"]
    yield s
    s.stop()


def test_channels(served, https_receiver, tmp_path):  # noqa: F811
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.key)
    secret_url = https_receiver.url + "/slack/T1/B2/s3cr3t-path"
    outputs = []

    def run(*args, input=None, code=0, **extra):
        r = berthctl(*args, env={**env, **extra}, input=input)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        no_traceback(r)
        outputs.append(r.stdout + r.stderr)
        return r

    def as_json(*args, **kwargs):
        return json.loads(run("-o", "json", *args, **kwargs).stdout)

    ntfy = as_json("channels", "create", "ntfy", "--event", "server.unreachable",
                   "--set", f"server={https_receiver.url}", "--set", "topic=ops",
                   "--description", "on call")
    assert (ntfy["type"], ntfy["settings"]["topic"], ntfy["is_active"]) == ("ntfy", "ops", True)

    # A secret on the command line is refused before any request, without echoing it.
    r = run("channels", "create", "slack", "--event", "backup.failed", "--set",
            f"url={secret_url}", code=2)
    assert "secret setting" in r.stderr
    slack = as_json("channels", "create", "slack", "--event", "backup.failed",
                    "--event", "server.unreachable", input=secret_url + "\n")
    assert slack["destination"] == https_receiver.url + "/…"
    assert "url" not in slack["settings"]

    listed = run("channels", "list").stdout.splitlines()
    assert listed[0].split() == ["ID", "TYPE", "DESTINATION", "EVENTS", "ACTIVE", "FAILURES"]
    assert [line.split()[:2] for line in listed[1:]] == [[ntfy["id"], "ntfy"],
                                                          [slack["id"], "slack"]]
    assert "description: on call" in run("channels", "show", ntfy["id"]).stdout

    changed = as_json("channels", "update", ntfy["id"], "--disable", "--set", "topic=night")
    assert (changed["is_active"], changed["settings"]["topic"]) == (False, "night")
    assert changed["destination"] == f"{https_receiver.url}/night"

    # The test message goes to the secret URL, then to the one BERTH_CHANNEL_SECRET
    # replaced it with; a failing one exits 1 with its reason.
    assert as_json("channels", "test", slack["id"])["success"] is True
    run("channels", "update", slack["id"], "--secret",
        BERTH_CHANNEL_SECRET=secret_url.replace("B2", "B3"))
    https_receiver.respond(500)
    r = run("channels", "test", slack["id"], code=1)
    assert "The test message failed" in r.stderr and "500" in r.stderr
    assert [r.path for r in https_receiver.wait_for(2)] == ["/slack/T1/B2/s3cr3t-path",
                                                             "/slack/T1/B3/s3cr3t-path"]

    assert as_json("channels", "deliveries", slack["id"]) == []
    assert run("channels", "deliveries", slack["id"]).stderr == "(none)\n"
    for channel in (ntfy, slack):
        run("channels", "delete", channel["id"])
    assert as_json("channels", "list") == []
    assert not any(secret_url in out or "s3cr3t" in out for out in outputs)
