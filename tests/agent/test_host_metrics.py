"""HostSampler on this machine, with the real Docker engine."""

import os
import time
import uuid

import docker
import psutil

from agent.host_metrics import HostSampler, physical_interfaces
from agent.rpc.v1 import agent_pb2 as pb


def test_sample_has_exactly_the_protocol_fields_in_sane_ranges(docker_client, tmp_path):
    started = time.monotonic()
    s = HostSampler(data_path=str(tmp_path), docker_client=docker_client).sample()
    assert time.monotonic() - started < 2  # the first call's baseline is short

    assert set(s) == {f.name for f in pb.HostMetrics.DESCRIPTOR.fields}
    pb.HostMetrics(**s)  # the agent sends it as is
    for key in ("cpu_percent", "memory_percent", "disk_percent"):
        assert 0 <= s[key] <= 100, key
    assert 0 < s["memory_used_bytes"] <= s["memory_total_bytes"]
    assert s["memory_total_bytes"] == psutil.virtual_memory().total
    disk = psutil.disk_usage(str(tmp_path))
    assert s["disk_total_bytes"] == disk.total
    assert 0 < s["disk_used_bytes"] <= s["disk_total_bytes"]
    assert s["network_rx_bytes_per_second"] >= 0
    assert s["network_tx_bytes_per_second"] >= 0


def test_memory_used_is_total_minus_available():
    s = HostSampler().sample()
    vm = psutil.virtual_memory()
    assert abs(s["memory_used_bytes"] - (vm.total - vm.available)) < 64 * 1024 * 1024
    assert abs(s["memory_percent"] - 100 * s["memory_used_bytes"] / vm.total) < 0.01


def test_rates_cover_the_time_since_the_previous_sample():
    sampler = HostSampler()
    sampler.sample()
    time.sleep(0.3)
    started = time.monotonic()
    s = sampler.sample()
    assert time.monotonic() - started < 0.2  # no new baseline once one exists
    assert 0 <= s["cpu_percent"] <= 100


def test_physical_interfaces_have_a_device():
    nics = physical_interfaces()
    assert "lo" not in nics
    for nic in nics:
        assert os.path.exists(f"/sys/class/net/{nic}/device")
    assert physical_interfaces("/nonexistent") == set()


def test_counts_containers_from_the_engine(docker_client, labeled_container):
    labeled_container(uuid.uuid4(), "erp", ["sleep", "infinity"])
    labeled_container(uuid.uuid4(), "erp", ["true"]).wait(timeout=30)
    rows = docker_client.api.containers(all=True)
    s = HostSampler(docker_client=docker_client).sample()
    # Other tests may start or stop containers meanwhile: bounds, not equality.
    assert s["containers_running"] >= 1
    assert s["container_count"] >= s["containers_running"] + 1
    assert abs(s["container_count"] - len(rows)) <= 20


def test_no_engine_counts_zero():
    dead = docker.DockerClient(base_url="unix:///nonexistent.sock", version="1.41", timeout=2)
    s = HostSampler(docker_client=dead).sample()
    assert (s["container_count"], s["containers_running"]) == (0, 0)


def test_counts_without_docker_py(labeled_container, monkeypatch):
    """A heartbeat counts containers over the engine socket, without docker-py."""
    import subprocess
    import sys
    import uuid

    labeled_container(str(uuid.uuid4()), "erp", ["sleep", "600"])
    code = ("import sys, agent.host_metrics as h; m = h.HostSampler().sample(); "
            "print(m['container_count'], m['containers_running'], 'docker' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    total, running, loaded = out.stdout.split()
    assert int(running) >= 1 and int(total) >= int(running) and loaded == "False"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"DOCKER_HOST": "unix:///nonexistent/docker.sock", "PATH": "/usr/bin"})
    assert out.stdout.split()[:2] == ["0", "0"]
