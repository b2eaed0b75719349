"""ContainerMetrics against real containers on the local engine: cgroup files
first, the engine's stats API when they cannot be read."""

import os
import time
import uuid

import docker
import psutil
import pytest

from agent.errors import EngineUnreachable
from agent.metrics.containers import ContainerMetrics
from protocol.v1 import agent_pb2 as pb

BURN = ["sh", "-c", "while :; do :; done"]
IDLE = ["sleep", "infinity"]
LIMIT = 96 * 1024 * 1024
FIELDS = {"status", "cpu_percent", "memory_used_bytes", "memory_limit_bytes", "memory_percent"}


def environment_id():
    """An id no agent takes for one of its environments (theirs are UUIDs): agents of
    other tests on this engine measure each environment's database by running psql
    in its PostgreSQL container, ~10 ms of CPU that an idle container would show."""
    return f"metrics-{uuid.uuid4().hex}"


class Env:
    def __init__(self, start):
        self.busy = environment_id()  # erp burns a core, postgres idles under a limit
        self.stopped = environment_id()  # erp has exited, no postgres
        self.twice = environment_id()  # an exited and a running erp (a redeploy)
        self.burner = start(self.busy, "erp", BURN)
        self.idle = start(self.busy, "postgres", IDLE, mem_limit=LIMIT)
        self.exited = start(self.stopped, "erp", ["true"])
        self.old = start(self.twice, "erp", ["true"])
        self.exited.wait(timeout=30)
        self.old.wait(timeout=30)
        self.new = start(self.twice, "erp", IDLE)
        for c in (self.burner, self.idle, self.exited, self.new):
            c.reload()


@pytest.fixture(scope="module")
def env(module_labeled_container):
    return Env(module_labeled_container)


def cpu_seconds(pid):
    """User + system CPU time of one host process, from /proc (independent of cgroups)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_cgroup_files_are_found_for_running_containers(docker_client, env):
    sampler = ContainerMetrics(docker_client)
    expected = 2 if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else 1
    assert sampler.cgroups.version == expected
    paths = sampler.cgroup_paths(env.burner.id)
    assert paths is not None and paths.version == expected
    assert env.burner.id in paths.cpu_dir and env.burner.id in paths.memory_dir


def test_busy_and_idle_containers(docker_client, env):
    sampler = ContainerMetrics(docker_client)
    cold = sampler.for_environment(env.busy)  # no previous sample: measured over ~100 ms
    assert set(cold) == {"erp", "postgres"}
    assert set(cold["erp"]) == FIELDS and cold["erp"]["status"] == "running"
    assert cold["erp"]["cpu_percent"] > 25
    assert cold["postgres"]["cpu_percent"] < 5

    pid = env.burner.attrs["State"]["Pid"]
    before = cpu_seconds(pid)
    started = time.monotonic()
    time.sleep(1)
    warm = sampler.for_environment(env.busy)  # measured since the previous sample
    kernel = 100 * (cpu_seconds(pid) - before) / (time.monotonic() - started)
    # About one core when the machine is quiet; whatever it got, the kernel agrees.
    assert 25 < warm["erp"]["cpu_percent"] < 100 * psutil.cpu_count() + 5
    assert abs(warm["erp"]["cpu_percent"] - kernel) < 15
    assert warm["postgres"]["cpu_percent"] < 5


def test_memory_limit_is_the_containers_or_the_hosts(docker_client, env):
    found = ContainerMetrics(docker_client).for_environment(env.busy)
    pg, erp = found["postgres"], found["erp"]
    assert pg["memory_limit_bytes"] == LIMIT
    assert 0 < pg["memory_used_bytes"] < LIMIT
    assert pg["memory_percent"] == pytest.approx(100 * pg["memory_used_bytes"] / LIMIT, abs=1e-3)
    assert erp["memory_limit_bytes"] == psutil.virtual_memory().total  # unlimited
    assert 0 < erp["memory_used_bytes"] < 64 * 1024 * 1024


def test_stopped_container_has_status_and_no_figures(docker_client, env):
    found = ContainerMetrics(docker_client).for_environment(env.stopped)
    assert found["erp"] == {"status": "exited", "cpu_percent": None, "memory_used_bytes": None,
                            "memory_limit_bytes": None, "memory_percent": None}
    assert found["postgres"] is None


def test_unknown_environment_has_no_containers(docker_client, env):
    assert ContainerMetrics(docker_client).for_environment(str(uuid.uuid4())) == {
        "erp": None, "postgres": None}


def test_running_container_wins_over_an_older_exited_one(docker_client, env):
    found = ContainerMetrics(docker_client).for_environment(env.twice)
    assert found["erp"]["status"] == "running"
    assert found["erp"]["memory_used_bytes"] > 0


def test_collect_by_ids(docker_client, env):
    sampler = ContainerMetrics(docker_client)
    missing = "f" * 64
    got = sampler.collect([env.burner.id, env.idle.id[:12], env.exited.id, missing])
    assert set(got) == {env.burner.id, env.idle.id[:12], env.exited.id, missing}
    assert got[env.burner.id]["cpu_percent"] > 25
    assert got[env.idle.id[:12]]["memory_limit_bytes"] == LIMIT
    assert got[env.exited.id]["status"] == "exited"
    assert got[env.exited.id]["cpu_percent"] is None
    assert got[missing] is None
    assert sampler.collect([]) == {}


def test_figures_fit_the_protocol_message(docker_client, env):
    for stats in ContainerMetrics(docker_client).for_environment(env.busy).values():
        msg = pb.ContainerStats(**{k: v for k, v in stats.items() if v is not None})
        assert msg.HasField("cpu_percent") and msg.status == "running"


def test_engine_api_fallback_agrees_with_cgroup_files(docker_client, env, tmp_path):
    files = ContainerMetrics(docker_client)
    api = ContainerMetrics(docker_client, cgroup_root=str(tmp_path))  # nothing readable
    assert api.cgroup_paths(env.burner.id) is None

    by_api = api.for_environment(env.busy)
    by_files = files.for_environment(env.busy)
    for role in ("erp", "postgres"):
        a, f = by_api[role], by_files[role]
        assert a["status"] == f["status"] == "running"
        assert a["memory_limit_bytes"] == f["memory_limit_bytes"]
        assert abs(a["memory_used_bytes"] - f["memory_used_bytes"]) < 4 * 1024 * 1024
    assert by_api["erp"]["cpu_percent"] > 25
    assert by_api["postgres"]["cpu_percent"] < 5


def test_cgroup_v2_layout_on_a_fake_tree(docker_client, env, tmp_path):
    """This host may run cgroup v1, so v2 is read from a fake tree laid out as
    the systemd driver does it, for a real (listed) container."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    scope = tmp_path / "system.slice" / f"docker-{env.idle.id}.scope"
    scope.mkdir(parents=True)
    (scope / "cpu.stat").write_text("usage_usec 1000000\nuser_usec 900000\nsystem_usec 100000\n")
    (scope / "memory.current").write_text("50000000\n")
    (scope / "memory.stat").write_text("anon 30000000\nfile 20000000\ninactive_file 8000000\n")
    (scope / "memory.max").write_text("67108864\n")

    sampler = ContainerMetrics(docker_client, cgroup_root=str(tmp_path))
    assert sampler.cgroup_paths(env.idle.id).version == 2
    first = sampler.collect([env.idle.id])[env.idle.id]
    assert first == {"status": "running", "cpu_percent": 0.0, "memory_used_bytes": 42000000,
                     "memory_limit_bytes": 67108864,
                     "memory_percent": pytest.approx(100 * 42000000 / 67108864, abs=1e-3)}

    started = time.monotonic()
    (scope / "cpu.stat").write_text("usage_usec 1500000\n")  # half a core-second more
    (scope / "memory.max").write_text("max\n")
    time.sleep(1)  # not a wait: the CPU figure is over the time between the samples
    second = sampler.collect([env.idle.id])[env.idle.id]
    assert 50 * 1 / (time.monotonic() - started + 0.2) < second["cpu_percent"] <= 50
    assert second["memory_limit_bytes"] == psutil.virtual_memory().total


def test_engine_unreachable():
    dead = docker.DockerClient(base_url="unix:///nonexistent.sock", version="1.41", timeout=2)
    started = time.monotonic()
    with pytest.raises(EngineUnreachable):
        ContainerMetrics(dead).for_environment(str(uuid.uuid4()))
    assert time.monotonic() - started < 2
