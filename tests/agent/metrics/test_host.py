"""HostSampler on this machine, with the real Docker engine."""

import os
import time
import uuid

import docker
import psutil

from agent.facts import host_facts
from agent.metrics import host as host_metrics
from agent.metrics.host import HostSampler, disk_path, physical_interfaces
from protocol.v1 import agent_pb2 as pb


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


def test_bridges_and_veths_are_not_physical(tmp_path):
    """Only interfaces backed by a device count: as /sys/class/net shows them, a
    NIC has a `device` link, Docker's bridge and the containers' veths do not."""
    for name, physical in (("eth0", True), ("ens3", True), ("lo", False), ("docker0", False),
                           ("veth1a2b3c4", False), ("br-0123456789ab", False)):
        (tmp_path / name).mkdir()
        if physical:
            (tmp_path / name / "device").mkdir()
    assert physical_interfaces(str(tmp_path)) == {"eth0", "ens3"}


def test_docker_interfaces_on_this_host_are_not_physical(labeled_container):
    """Docker runs here: its bridge and a running container's veth are left out."""
    labeled_container(uuid.uuid4(), "erp", ["sleep", "600"])  # default bridge: adds a veth
    names = os.listdir("/sys/class/net")
    docker_ifaces = [n for n in names if n == "docker0" or n.startswith("veth")]
    assert "docker0" in docker_ifaces and any(n.startswith("veth") for n in docker_ifaces)
    assert not set(docker_ifaces) & physical_interfaces()


def test_disk_path_is_the_environment_root_else_the_data_dir_else_root(tmp_path, monkeypatch):
    env_root, data = tmp_path / "srv", tmp_path / "data"
    monkeypatch.setenv("BERTH_AGENT_ENV_ROOT", str(env_root))
    monkeypatch.setenv("BERTH_AGENT_DATA_DIR", str(data))
    assert disk_path() == "/"
    data.mkdir()
    assert disk_path() == str(data)
    env_root.mkdir()
    assert disk_path() == str(env_root)
    monkeypatch.delenv("BERTH_AGENT_ENV_ROOT")
    monkeypatch.setattr(host_metrics, "ENV_ROOT", str(tmp_path / "default-root"))
    assert disk_path() == str(data)  # the default root, /srv/berth, does not exist


def test_sampler_and_facts_measure_the_disk_of_the_environment_root(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTH_AGENT_ENV_ROOT", str(tmp_path))
    measured = []
    real = psutil.disk_usage
    monkeypatch.setattr(psutil, "disk_usage", lambda path: measured.append(path) or real(path))
    s = HostSampler(docker_client=docker.DockerClient(base_url="unix:///nonexistent.sock",
                                                      version="1.41", timeout=2)).sample()
    facts = host_facts()
    assert measured == [str(tmp_path), str(tmp_path)]
    assert s["disk_total_bytes"] == real(str(tmp_path)).total
    assert facts.disk_gb == real(str(tmp_path)).total // 1024 ** 3


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
    code = ("import sys, agent.metrics.host as h; m = h.HostSampler().sample(); "
            "print(m['container_count'], m['containers_running'], 'docker' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    total, running, loaded = out.stdout.split()
    assert int(running) >= 1 and int(total) >= int(running) and loaded == "False"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"DOCKER_HOST": "unix:///nonexistent/docker.sock", "PATH": "/usr/bin"})
    assert out.stdout.split()[:2] == ["0", "0"]
