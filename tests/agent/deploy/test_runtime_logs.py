"""runtime_logs against real containers on the local engine."""

import time
import uuid

import docker
import pytest

from agent.deploy.runtime_logs import runtime_logs
from agent.errors import ContainerNotFound, EngineTimeout, EngineUnreachable
from tests.support.docker_engine import silent_engine

BIG_LINE = 1500  # bytes per line of the big log, newline excluded


class Envs:
    def __init__(self, start):
        self.printed = str(uuid.uuid4())  # erp: 50 lines on stdout; postgres: one on stderr
        self.big = str(uuid.uuid4())  # erp: 1200 lines of 1500 bytes (1.8 MB)
        self.quiet = str(uuid.uuid4())  # erp printed nothing
        started = [
            start(self.printed, "erp", ["seq", "-f", "line %g", "1", "50"]),
            start(self.printed, "postgres", ["sh", "-c", "echo 'database system is ready' >&2"]),
            start(self.big, "erp", ["python3", "-c", (
                f"for i in range(1200): print(f'{{i:05d}} ' + 'x' * {BIG_LINE - 6})")]),
            start(self.quiet, "erp", ["true"]),
        ]
        for c in started:  # an exited container's log is complete
            assert c.wait(timeout=60)["StatusCode"] == 0


@pytest.fixture(scope="module")
def envs(module_labeled_container):
    return Envs(module_labeled_container)


def test_last_lines_oldest_first(docker_client, envs):
    got = runtime_logs(docker_client, envs.printed, "erp", 10)
    assert got == {"log": "\n".join(f"line {i}" for i in range(41, 51)), "lines": 10,
                   "truncated": True}


def test_all_lines_when_asking_for_as_many_or_more(docker_client, envs):
    everything = "\n".join(f"line {i}" for i in range(1, 51))
    for lines in (50, 51, 1000):
        got = runtime_logs(docker_client, envs.printed, "erp", lines)
        assert got == {"log": everything, "lines": 50, "truncated": False}, lines


def test_one_line(docker_client, envs):
    assert runtime_logs(docker_client, envs.printed, "erp", 1) == {
        "log": "line 50", "lines": 1, "truncated": True}


def test_container_is_an_alias_of_erp(docker_client, envs):
    assert runtime_logs(docker_client, envs.printed, "container", 5) == runtime_logs(
        docker_client, envs.printed, "erp", 5)


def test_postgres_source_includes_stderr(docker_client, envs):
    assert runtime_logs(docker_client, envs.printed, "postgres", 200) == {
        "log": "database system is ready", "lines": 1, "truncated": False}


def test_one_megabyte_cap_keeps_the_newest_whole_lines(docker_client, envs):
    got = runtime_logs(docker_client, envs.big, "erp", 1000)
    kept = (1_000_000 + 1) // (BIG_LINE + 1)  # each line costs its bytes and a separator
    assert got["lines"] == kept and got["truncated"] is True
    assert len(got["log"].encode()) <= 1_000_000
    rows = got["log"].split("\n")
    assert len(rows) == kept and all(len(r) == BIG_LINE for r in rows)
    assert [int(r[:5]) for r in rows] == list(range(1200 - kept, 1200))


def test_cap_is_a_parameter(docker_client, envs):
    got = runtime_logs(docker_client, envs.printed, "erp", 50, max_bytes=len("line 49\nline 50"))
    assert got == {"log": "line 49\nline 50", "lines": 2, "truncated": True}


def test_empty_log(docker_client, envs):
    assert runtime_logs(docker_client, envs.quiet, "erp", 200) == {
        "log": "", "lines": 0, "truncated": False}


def test_missing_container(docker_client, envs):
    with pytest.raises(ContainerNotFound) as caught:
        runtime_logs(docker_client, envs.quiet, "postgres", 200)
    assert caught.value.code == "container_not_found"
    with pytest.raises(ContainerNotFound):
        runtime_logs(docker_client, str(uuid.uuid4()), "erp", 200)


@pytest.mark.parametrize("source,lines", [("nginx", 10), ("erp", 0), ("erp", 1001),
                                          ("erp", "10"), ("erp", True)])
def test_invalid_arguments(docker_client, source, lines):
    with pytest.raises(ValueError):
        runtime_logs(docker_client, str(uuid.uuid4()), source, lines)


def test_engine_unreachable_fails_fast():
    dead = docker.DockerClient(base_url="unix:///nonexistent.sock", version="1.41", timeout=20)
    started = time.monotonic()
    with pytest.raises(EngineUnreachable) as caught:
        runtime_logs(dead, str(uuid.uuid4()), "erp", 200)
    assert caught.value.code == "engine_unreachable"
    assert time.monotonic() - started < 2


def test_engine_that_never_answers_times_out(tmp_path):
    with silent_engine(tmp_path / "silent.sock") as url:
        silent = docker.DockerClient(base_url=url, version="1.41", timeout=60)
        started = time.monotonic()
        with pytest.raises(EngineTimeout) as caught:
            runtime_logs(silent, str(uuid.uuid4()), "erp", 200, timeout_s=1)
        assert caught.value.code == "engine_timeout"
        assert time.monotonic() - started < 3
