"""CPU and memory of an environment's containers, read from the cgroup files
the kernel keeps for each container (microseconds per container, where the
engine's stats API takes about a second). The engine's stats API is the
fallback when those files cannot be read, e.g. an agent in a container
without the host's cgroup filesystem.

Figures follow `docker stats`: CPU 100 = one core; memory used excludes
inactive page cache; the limit is the container's, or the host's memory
when it has none."""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

from agent.errors import ContainerNotFound, call_with_deadline

ENV_LABEL, ROLE_LABEL = "berth.environment_id", "berth.role"
ROLES = ("erp", "postgres")
BASELINE_S = 0.1  # without a usable previous sample, CPU is measured over this long
MIN_INTERVAL_S = 0.05  # a previous sample younger than this is too close to divide by
MAX_AGE_S = 60.0  # an older previous sample no longer says what "now" is
ENGINE_TIMEOUT_S = 8  # below the control plane's 10 s wait for metrics
UNLIMITED = 1 << 62  # cgroup v1 reports "no limit" as a huge page-rounded number
# The engine's words for a container that does not run, as the spec says them over SSH.
STOPPED_STATES = {"exited": "stopped", "created": "stopped", "dead": "stopped"}
_CPUACCT = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")


def _read_int(path):
    with open(path) as f:
        return int(f.read().strip())


def _read_keyed(path):
    with open(path) as f:
        return {k: int(v) for k, v in (line.split() for line in f if line.strip())}


def _expand_slice(name):
    """systemd's layout of a slice: a-b.slice lives in a.slice/a-b.slice."""
    if name == "-.slice":
        return ""
    parts, path = name[: -len(".slice")].split("-"), []
    for i in range(len(parts)):
        path.append("-".join(parts[: i + 1]) + ".slice")
    return "/".join(path)


class CgroupPaths:
    """Where one container's counters live, for cgroup v1 or v2."""

    def __init__(self, version, cpu_dir, memory_dir):
        self.version, self.cpu_dir, self.memory_dir = version, cpu_dir, memory_dir

    def cpu_usage_ns(self):
        if self.version == 1:
            return _read_int(os.path.join(self.cpu_dir, "cpuacct.usage"))
        return _read_keyed(os.path.join(self.cpu_dir, "cpu.stat"))["usage_usec"] * 1000

    def memory(self):
        """(used without inactive page cache, limit or None when unlimited)."""
        d = self.memory_dir
        stat = _read_keyed(os.path.join(d, "memory.stat"))
        if self.version == 1:
            usage = _read_int(os.path.join(d, "memory.usage_in_bytes"))
            inactive = stat.get("total_inactive_file", 0)
            limit = _read_int(os.path.join(d, "memory.limit_in_bytes"))
        else:
            usage = _read_int(os.path.join(d, "memory.current"))
            inactive = stat.get("inactive_file", 0)
            with open(os.path.join(d, "memory.max")) as f:
                raw = f.read().strip()
            limit = None if raw == "max" else int(raw)
        used = usage - inactive if inactive < usage else usage
        return used, (limit if limit is not None and limit < UNLIMITED else None)


class Cgroups:
    """Finds containers' cgroup directories under one cgroup filesystem root."""

    def __init__(self, root):
        self.root = root
        if os.path.exists(os.path.join(root, "cgroup.controllers")):
            self.version = 2
        elif os.path.isdir(os.path.join(root, "memory")):
            self.version = 1
        else:
            self.version = None  # not readable here: use the engine's API
        self.cpuacct = next((c for c in _CPUACCT if os.path.isdir(os.path.join(root, c))),
                            None)

    def candidates(self, container_id, parent=None, proc_paths=()):
        """Relative cgroup paths to try, most specific first."""
        rel = [p.strip("/") for p in proc_paths]
        if parent:
            parent = parent.strip("/")
            rel.append(f"{_expand_slice(parent)}/docker-{container_id}.scope"
                       if parent.endswith(".slice") else f"{parent}/{container_id}")
        rel += [f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"]
        return rel

    def find(self, container_id, parent=None, proc_paths=()):
        if self.version is None or (self.version == 1 and self.cpuacct is None):
            return None
        for rel in self.candidates(container_id, parent, proc_paths):
            if self.version == 2:
                d = os.path.join(self.root, rel)
                if os.path.exists(os.path.join(d, "cpu.stat")) and os.path.exists(
                        os.path.join(d, "memory.current")):
                    return CgroupPaths(2, d, d)
            else:
                cpu = os.path.join(self.root, self.cpuacct, rel)
                mem = os.path.join(self.root, "memory", rel)
                if os.path.exists(os.path.join(cpu, "cpuacct.usage")) and os.path.exists(
                        os.path.join(mem, "memory.usage_in_bytes")):
                    return CgroupPaths(1, cpu, mem)
        return None


def _proc_cgroup_paths(pid, version):
    """The container's own cgroup paths, as its init process sees them from here."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (version == 2 and controllers == "") or (
                version == 1 and "memory" in controllers.split(",")):
            out.append(path)
    return out


def _sort_key(row):
    """Prefer a running container, then the newest."""
    return (row.get("State") != "running", -(row.get("Created") or 0))


class ContainerMetrics:
    def __init__(self, docker_client, cgroup_root="/sys/fs/cgroup", max_age=MAX_AGE_S):
        self.client = docker_client
        self.max_age = max_age  # a previous sample older than this is not divided by
        self._looked = False  # whether `heartbeat` has looked once
        self.cgroups = Cgroups(cgroup_root)
        self._paths = {}  # container id -> CgroupPaths
        self._prev = {}  # container id -> (monotonic time, cpu usage ns)
        self._lock = threading.Lock()
        self._host_memory = psutil.virtual_memory().total

    # --- public ---------------------------------------------------------------

    def for_environment(self, environment_id):
        """{"erp": stats|None, "postgres": stats|None} for the environment's containers."""
        rows = self._list({"label": f"{ENV_LABEL}={environment_id}"})
        chosen = {}
        for row in sorted(rows, key=_sort_key):
            role = (row.get("Labels") or {}).get(ROLE_LABEL)
            if role in ROLES and role not in chosen:
                chosen[role] = row
        stats = self._stats(list(chosen.values()))
        return {role: stats[chosen[role]["Id"]] if role in chosen else None for role in ROLES}

    def states(self, environment_id):
        """{"erp": {"status": …}|None, "postgres": …}: the containers' states alone, as a
        server reached over SSH reports them (the spec: no CPU or memory figures;
        a container that is not running is `stopped`, not left out)."""
        rows = self._list({"label": f"{ENV_LABEL}={environment_id}"})
        chosen = {}
        for row in sorted(rows, key=_sort_key):
            role = (row.get("Labels") or {}).get(ROLE_LABEL)
            if role in ROLES and role not in chosen:
                state = row.get("State") or "unknown"
                chosen[role] = {"status": STOPPED_STATES.get(state, state)}
        return {role: chosen.get(role) for role in ROLES}

    def collect(self, container_ids):
        """{id: stats} for the given ids (full or prefixes); None for an unknown id."""
        ids = list(container_ids)
        rows = self._list({"id": ids}) if ids else []
        stats = self._stats(rows)
        out = {}
        for cid in ids:
            match = next((r["Id"] for r in rows if r["Id"].startswith(cid)), None)
            out[cid] = stats[match] if match else None
        return out

    def heartbeat(self, rows):
        """{environment id: {"erp": stats, "postgres": stats}} of the running containers
        among `rows` (the engine's list), from cgroup files alone and without waiting:
        CPU over the time since this sampler's previous look (None at the first)."""
        chosen = {}
        for row in sorted(rows, key=_sort_key):
            labels = row.get("Labels") or {}
            env, role = labels.get(ENV_LABEL), labels.get(ROLE_LABEL)
            if env and role in ROLES and row.get("State") == "running":
                chosen.setdefault(env, {}).setdefault(role, row)
        found = {}
        for roles in chosen.values():
            for row in roles.values():
                paths = self._resolve(row["Id"])
                if paths is not None:
                    found[row["Id"]] = paths
        out = {row["Id"]: {"status": "running", "cpu_percent": None, "memory_used_bytes": None,
                           "memory_limit_bytes": None, "memory_percent": None}
               for roles in chosen.values() for row in roles.values()}
        self._from_files(found, out, wait=False)
        if not self._looked:  # the first look only starts the CPU's count: nothing to send
            self._looked = True
            return {}
        return {env: {role: out[row["Id"]] for role, row in roles.items()}
                for env, roles in chosen.items()}

    def cgroup_paths(self, container_id):
        """Where this container's counters are read, or None (engine API fallback)."""
        return self._resolve(container_id)

    # --- engine ---------------------------------------------------------------

    def _list(self, filters):
        return call_with_deadline(self.client.api.containers, ENGINE_TIMEOUT_S, all=True,
                                  filters=filters)

    def _resolve(self, cid):
        paths = self._paths.get(cid)
        if paths is not None or self.cgroups.version is None:
            return paths
        paths = self.cgroups.find(cid)
        if paths is None and self.client is not None:  # a custom cgroup parent, or a
            # layout the probes do not know: the engine says where (not for heartbeats)
            try:
                info = call_with_deadline(self.client.api.inspect_container, ENGINE_TIMEOUT_S,
                                          cid)
            except ContainerNotFound:
                return None
            pid = (info.get("State") or {}).get("Pid")
            paths = self.cgroups.find(
                cid, (info.get("HostConfig") or {}).get("CgroupParent"),
                _proc_cgroup_paths(pid, self.cgroups.version) if pid else ())
        if paths is not None:
            if len(self._paths) > 4096:
                self._paths.clear()
            self._paths[cid] = paths
        return paths

    # --- figures --------------------------------------------------------------

    def _stats(self, rows):
        out, from_files, from_api = {}, {}, []
        for row in rows:
            cid, state = row["Id"], row.get("State") or "unknown"
            out[cid] = {"status": state, "cpu_percent": None, "memory_used_bytes": None,
                        "memory_limit_bytes": None, "memory_percent": None}
            if state != "running":
                continue
            paths = self._resolve(cid)
            if paths is None:
                from_api.append(cid)
            else:
                from_files[cid] = paths
        unread = self._from_files(from_files, out)
        self._from_api(from_api + unread, out)
        return out

    def _from_files(self, found, out, wait=True):
        """Fill `out` from cgroup files; returns the ids whose files vanished. Without
        `wait`, a container with no usable previous sample gets no CPU figure."""
        readings, unread = {}, []
        for cid, paths in found.items():
            try:
                readings[cid] = (paths.cpu_usage_ns(), time.monotonic(), paths.memory())
            except (OSError, KeyError, ValueError):
                self._paths.pop(cid, None)  # stopped meanwhile, or moved: ask the engine
                unread.append(cid)
        cpu, baselines = {}, {}
        with self._lock:
            self._forget_old()
            for cid, (usage, at, _) in readings.items():
                prev = self._prev.get(cid)
                usable = prev is not None and usage >= prev[1]
                age = at - prev[0] if usable else None
                if usable and MIN_INTERVAL_S <= age <= self.max_age:
                    cpu[cid] = _percent(prev, (at, usage))
                    self._prev[cid] = (at, usage)
                else:  # measure now: from a too-recent sample, or from this one
                    baselines[cid] = prev if usable and age < MIN_INTERVAL_S else (at, usage)
        if baselines and not wait:
            with self._lock:
                self._prev.update({cid: base for cid, base in baselines.items()})
        elif baselines:
            oldest = min(at for at, _ in baselines.values())
            time.sleep(max(0.0, BASELINE_S - (time.monotonic() - oldest)))
            for cid, base in baselines.items():
                try:
                    usage = found[cid].cpu_usage_ns()
                except (OSError, KeyError, ValueError):
                    continue
                now = (time.monotonic(), usage)
                cpu[cid] = _percent(base, now)
                with self._lock:
                    self._prev[cid] = now
        for cid, (_, _, (used, limit)) in readings.items():
            out[cid].update(self._memory(used, limit), cpu_percent=cpu.get(cid))
        return unread

    def _forget_old(self):
        cutoff = time.monotonic() - self.max_age
        for cid in [c for c, (at, _) in self._prev.items() if at < cutoff]:
            del self._prev[cid]

    def _memory(self, used, limit):
        limit = min(limit, self._host_memory) if limit else self._host_memory
        return {"memory_used_bytes": used, "memory_limit_bytes": limit,
                "memory_percent": round(100.0 * used / limit, 4) if limit else None}

    def _from_api(self, ids, out):
        """The engine's stats API (about a second each, so in parallel)."""
        if not ids:
            return
        with ThreadPoolExecutor(max_workers=min(8, len(ids))) as pool:
            for cid, s in zip(ids, pool.map(self._api_stats, ids), strict=True):
                if s is not None:
                    out[cid].update(s)

    def _api_stats(self, cid):
        try:
            s = call_with_deadline(self.client.api.stats, ENGINE_TIMEOUT_S, cid, stream=False)
        except ContainerNotFound:
            return None  # removed since it was listed
        cpu, pre = s.get("cpu_stats") or {}, s.get("precpu_stats") or {}
        mem = s.get("memory_stats") or {}
        result = {}
        if "usage" in mem:
            stats = mem.get("stats") or {}
            inactive = stats.get("total_inactive_file", stats.get("inactive_file", 0))
            used = mem["usage"] - inactive if inactive < mem["usage"] else mem["usage"]
            limit = mem.get("limit")
            result.update(self._memory(used, limit if limit and limit < UNLIMITED else None))
        total = (cpu.get("cpu_usage") or {}).get("total_usage")
        pre_total = (pre.get("cpu_usage") or {}).get("total_usage")
        system, pre_system = cpu.get("system_cpu_usage"), pre.get("system_cpu_usage")
        if None not in (total, pre_total, system, pre_system) and system > pre_system:
            cores = cpu.get("online_cpus") or len(
                (cpu.get("cpu_usage") or {}).get("percpu_usage") or ()) or 1
            result["cpu_percent"] = round(
                max(0.0, (total - pre_total) / (system - pre_system) * cores * 100.0), 2)
        return result


def _percent(before, after):
    """CPU share between two (monotonic seconds, usage ns) samples; 100 = one core."""
    elapsed = after[0] - before[0]
    if elapsed <= 0:
        return 0.0
    return round(max(0.0, (after[1] - before[1]) / (elapsed * 1e9) * 100.0), 2)
