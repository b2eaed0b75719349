"""Host metrics for heartbeats and server-metrics requests: the fields of the
protocol's HostMetrics message, from psutil and the container engine."""

import logging
import os
import threading
import time

import psutil

from agent.config import data_dir
from agent.errors import AgentError, call_with_deadline
from agent.metrics import engine

log = logging.getLogger("berth.agent")

SYS_CLASS_NET = "/sys/class/net"
BASELINE_S = 0.2  # the first sample measures rates over this long
MIN_INTERVAL_S = 0.05  # closer samples wait, so a rate never divides by ~0
ENGINE_TIMEOUT_S = 5
ENV_ROOT = "/srv/berth"  # agent.deploy.environments.DEFAULT_ROOT (metrics import no deploy module)


def disk_path():
    """The filesystem the disk figures describe: the one environments' files live
    on (BERTH_AGENT_ENV_ROOT, default /srv/berth), else the agent's data dir, else /."""
    for path in (os.environ.get("BERTH_AGENT_ENV_ROOT", ENV_ROOT), str(data_dir())):
        if os.path.isdir(path):
            return path
    return "/"


def physical_interfaces(sys_class_net=SYS_CLASS_NET):
    """NICs backed by a device: no loopback, bridges, veths, bonds or tunnels."""
    try:
        names = os.listdir(sys_class_net)
    except OSError:
        return set()
    return {n for n in names if os.path.exists(os.path.join(sys_class_net, n, "device"))}


def _cpu_busy_total(t):
    total = sum(t)
    # On Linux, guest time is already counted in user and nice.
    total -= getattr(t, "guest", 0) + getattr(t, "guest_nice", 0)
    idle = t.idle + getattr(t, "iowait", 0)
    return total - idle, total


class _Reading:
    def __init__(self):
        self.at = time.monotonic()
        self.cpu = _cpu_busy_total(psutil.cpu_times())
        counters = psutil.net_io_counters(pernic=True)
        nics = physical_interfaces()
        self.rx = sum(c.bytes_recv for n, c in counters.items() if n in nics)
        self.tx = sum(c.bytes_sent for n, c in counters.items() if n in nics)


class HostSampler:
    """Each sample's CPU share and network rates cover the time since the
    previous sample (the first one takes its own short baseline)."""

    def __init__(self, data_path=None, docker_client=None):
        self.data_path = data_path  # None: disk_path() at each sample (the root may appear later)
        self.docker_client = docker_client
        self._prev = None
        self._lock = threading.Lock()

    def sample(self):
        with self._lock:
            prev = self._prev
            if prev is None:
                prev = _Reading()
                time.sleep(BASELINE_S)
            elif time.monotonic() - prev.at < MIN_INTERVAL_S:
                time.sleep(MIN_INTERVAL_S - (time.monotonic() - prev.at))
            now = _Reading()
            self._prev = now
        elapsed = now.at - prev.at
        busy, total = now.cpu[0] - prev.cpu[0], now.cpu[1] - prev.cpu[1]
        cpu = min(100.0, max(0.0, 100.0 * busy / total)) if total > 0 else 0.0
        mem = psutil.virtual_memory()
        mem_used = mem.total - mem.available
        disk = psutil.disk_usage(self.data_path or disk_path())
        count, running = self._containers()
        return {
            "cpu_percent": round(cpu, 2),
            "memory_percent": round(100.0 * mem_used / mem.total, 2) if mem.total else 0.0,
            "disk_percent": disk.percent,
            "memory_used_bytes": mem_used,
            "memory_total_bytes": mem.total,
            "disk_used_bytes": disk.used,
            "disk_total_bytes": disk.total,
            # Counters that went backwards (an interface reset) count as no traffic.
            "network_rx_bytes_per_second": round(max(0, now.rx - prev.rx) / elapsed, 2),
            "network_tx_bytes_per_second": round(max(0, now.tx - prev.tx) / elapsed, 2),
            "container_count": count,
            "containers_running": running,
        }

    def _containers(self):
        """(all containers, running ones) on the host; (0, 0) without an engine.
        Without a docker-py client, asks the engine through agent.metrics.engine,
        which keeps docker-py out of a heartbeat's memory."""
        try:
            if self.docker_client is None:
                states = engine.container_states(ENGINE_TIMEOUT_S)
            else:
                rows = call_with_deadline(self.docker_client.api.containers, ENGINE_TIMEOUT_S,
                                          all=True)
                states = [r.get("State") for r in rows]
        except AgentError as exc:
            log.debug("container counts unavailable: %s", exc)
            return 0, 0
        return len(states), sum(1 for state in states if state == "running")
