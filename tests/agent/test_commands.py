"""The agent's command registry: each kind the control plane queues has one handler."""

import subprocess
import sys

import pytest

from agent import __version__, commands


class Recorder:
    calls = []

    def __init__(self, docker_client):
        self.docker_client = docker_client

    def __getattr__(self, name):
        return lambda *args, **options: Recorder.calls.append((name, args)) or {"did": name}


class FakeAgent:
    data_dir = "/nonexistent/agent-data"  # a destroy forgets mails there: none for "e1"

    def docker(self):
        return "engine"


def test_every_kind_has_one_handler():
    assert set(commands.load()) == {"ping", "deploy", "start", "stop", "restart", "destroy",
                                    "backup", "restore", "export", "drill", "routes",
                                    "upgrade", "test"}


def test_a_kind_cannot_have_two_handlers():
    with pytest.raises(ValueError, match="two handlers for the command kind 'ping'"):
        commands.handles("ping")(lambda agent, payload, log: None)
    assert commands.HANDLERS["ping"] is commands.ping


def test_the_handler_modules_load_when_a_command_first_needs_one():
    """An idle agent (and a ping) imports none of them."""
    code = ("import sys; from agent import commands, daemon; "
            "loaded = lambda: [m for m in commands.HANDLER_MODULES if m in sys.modules]; "
            "idle = loaded(); commands.run(None, 'ping', {}, lambda *line: None); "
            "pinged = loaded(); commands.run(None, 'routes', {'environment_id': 'e1'}, None); "
            "print(idle, pinged, loaded() == list(commands.HANDLER_MODULES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "[]", "True"]


def test_ping_answers_with_the_version():
    lines = []
    assert commands.run(FakeAgent(), "ping", {}, lambda *line: lines.append(line)) == {
        "pong": True, "agent_version": __version__}
    assert lines == [("info", f"pong from berth-agent {__version__}")]


@pytest.mark.parametrize("kind, payload, expected", [
    ("deploy", {"environment_id": "e1"}, ("deploy", ({"environment_id": "e1"},))),
    ("start", {"environment_id": "e1"}, ("start", ("e1",))),
    ("stop", {"environment_id": "e1"}, ("stop", ("e1",))),
    ("restart", {"environment_id": "e1"}, ("restart", ("e1",))),
    ("destroy", {"environment_id": "e1", "delete_data": True}, ("destroy", ("e1", True))),
    ("destroy", {"environment_id": "e1"}, ("destroy", ("e1", False))),
])
def test_environment_commands_reach_their_method(monkeypatch, kind, payload, expected):
    import agent.deploy.checks
    import agent.deploy.environments

    monkeypatch.setattr(agent.deploy.environments, "Environments", Recorder)
    # A deploy's post-deploy checks look at real containers (tests/e2e/deploys).
    monkeypatch.setattr(agent.deploy.checks, "run", lambda *args: [])
    Recorder.root = agent.deploy.environments.env_root()
    Recorder.calls = []
    log = object()
    done = {"did": kind, "checks": []} if kind == "deploy" else {"did": kind}
    assert commands.run(FakeAgent(), kind, payload, log) == done
    name, args = Recorder.calls[0]
    assert (name, args[:-1]) == expected and args[-1] is log


def test_an_unknown_kind_fails_the_command():
    with pytest.raises(ValueError, match="unknown command kind 'snapshot'"):
        commands.run(FakeAgent(), "snapshot", {}, lambda *line: None)
