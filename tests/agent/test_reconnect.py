"""The agent's reconnect loop: exponential backoff with full jitter capped at
30 s, reset after a welcomed session, and a "disconnected since" that tells
when the connection was lost, not when it was last retried."""

import random
import uuid

import pytest

from agent import daemon
from agent.config import AgentConfig
from tests.support.agents import AgentProcess, wait_for


@pytest.mark.parametrize("attempt, ceiling", [
    (0, 1), (1, 2), (2, 4), (3, 8), (4, 16), (5, 30), (6, 30), (50, 30), (2000, 30)])
def test_backoff_is_full_jitter_up_to_an_exponential_ceiling_capped_at_30s(
        attempt, ceiling, monkeypatch):
    calls = []
    monkeypatch.setattr(random, "uniform", lambda a, b: calls.append((a, b)) or b)
    assert daemon.backoff(attempt) == ceiling
    assert calls == [(0, ceiling)]


def test_backoff_values_spread_over_the_whole_range():
    delays = [daemon.backoff(10) for _ in range(2000)]
    assert all(0 <= d <= 30 for d in delays)
    # Full jitter, not "half the ceiling plus jitter": short waits are as likely as long ones.
    assert min(delays) < 3 and max(delays) > 27
    assert 12 < sum(delays) / len(delays) < 18


def _agent(tmp_path):
    config = AgentConfig(control_plane="http://127.0.0.1:1", grpc_address="127.0.0.1:1",
                         server_id=str(uuid.uuid4()), credential="agt_live_" + "x" * 40)
    return daemon.Agent(config, tmp_path)


def test_attempts_reset_after_a_welcome_and_since_keeps_the_first_failure(tmp_path, monkeypatch):
    agent = _agent(tmp_path)
    clock = iter(f"t{i}" for i in range(1, 100))
    monkeypatch.setattr(daemon, "now_iso", lambda: next(clock))
    outcomes = iter([False, False, True, False, False])
    seen = []

    def session():
        welcomed = next(outcomes)
        if welcomed:
            agent.status.update(connected=True, since="welcome")
        return welcomed

    def backoff(attempt):
        seen.append((attempt, agent.status.state["connected"], agent.status.state["since"]))
        if len(seen) == 5:
            agent.stop.set()
        return 0

    monkeypatch.setattr(agent, "_session", session)
    monkeypatch.setattr(daemon, "backoff", backoff)
    # The disk meter's first pass would take a time from the same fake clock.
    monkeypatch.setattr(agent, "_start_disk_meter", lambda: None)
    agent.run_forever()
    agent.pool.shutdown()
    assert seen == [
        (1, False, "t1"), (2, False, "t1"),  # retries keep the time of the first failure
        (0, False, "t2"),                    # a welcomed session ended: lost at t2
        (1, False, "t2"), (2, False, "t2"),
    ]


def test_status_shows_when_the_connection_failed_not_the_last_retry(tmp_path):
    """A real `berth-agent run` against an address where nothing listens."""
    agent = AgentProcess(tmp_path, "127.0.0.1:1", uuid.uuid4(), "agt_live_" + "x" * 40).start()
    try:
        first = wait_for(lambda: agent.status()[1].get("since"), timeout=20,
                         what="the first failure")
        # Retries come after 0-2 s, 0-4 s, 0-8 s...: wait for one in a later second.
        code, later = wait_for(
            lambda: (s := agent.status())[1]["last_error_at"] > first and s,
            timeout=60, interval=0.2, what="a retry that failed later")
        assert code == 1 and later["connected"] is False and later["running"] is True
        assert later["since"] == first
        assert later["last_error"].startswith("UNAVAILABLE")
    finally:
        agent.kill()
