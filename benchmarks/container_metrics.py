"""Benchmark: ContainerMetrics.collect (cgroup files) against `docker stats --no-stream`.

Starts N labeled idle containers from the local test image (build it with
scripts/build-test-images.sh), then times, in interleaved rounds of one run:
  cold   - collect(ids) on a new sampler (no previous samples: two reads ~100 ms apart)
  warm   - collect(ids) on a sampler that sampled them before
  docker - `docker stats --no-stream <ids>` (the engine's stats API, per container)
Reports the median round of each and the ratios, PASS/FAIL against the target
(collect at least 10x faster, cold). The containers are removed at the end.
Always exits 0.

    python benchmarks/container_metrics.py [--containers 20] [--rounds 3]
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.metrics.containers import ContainerMetrics  # noqa: E402

TARGET = 10.0
IMAGE = "berth-test-base:latest"


def start(client, environment_id, n):
    def one(i):
        return client.containers.run(
            IMAGE, ["sleep", "infinity"], detach=True,
            name=f"berth-bench-{i:02d}-{environment_id[:8]}",
            labels={"berth.environment_id": environment_id, "berth.role": "erp"})

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(n)))


def remove(containers):
    def one(c):
        try:
            c.remove(force=True)
        except docker.errors.NotFound:
            pass

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, containers))


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    client = docker.from_env(timeout=60)
    docker_cli = shutil.which("docker") or "docker"
    environment_id = str(uuid.uuid4())
    containers = []
    try:
        containers = start(client, environment_id, args.containers)
        ids = [c.id for c in containers]
        warm_sampler = ContainerMetrics(client)
        warm_sampler.collect(ids)
        from_files = sum(warm_sampler.cgroup_paths(i) is not None for i in ids)
        times = {"cold": [], "warm": [], "docker": []}
        for _ in range(args.rounds):
            t, got = timed(lambda: ContainerMetrics(client).collect(ids))
            assert all(s and s["status"] == "running" and s["cpu_percent"] is not None
                       for s in got.values()), got
            times["cold"].append(t)
            time.sleep(0.2)  # the warm sampler's previous sample is 0.2 s old or more
            t, _ = timed(lambda: warm_sampler.collect(ids))
            times["warm"].append(t)
            t, out = timed(lambda: subprocess.run(
                [docker_cli, "stats", "--no-stream", *ids], capture_output=True, text=True,
                check=True))
            assert len(out.stdout.strip().splitlines()) == len(ids) + 1, out.stdout
            times["docker"].append(t)
    finally:
        remove(containers)

    med = {k: statistics.median(v) for k, v in times.items()}
    version = warm_sampler.cgroups.version
    print(f"{args.containers} idle containers, median of {args.rounds} rounds; "
          f"collect read cgroup v{version} files for {from_files}/{args.containers}")
    for k, label in (("cold", "collect (cold)"), ("warm", "collect (warm)"),
                     ("docker", "docker stats --no-stream")):
        rounds = " ".join(f"{t * 1000:.1f}" for t in times[k])
        print(f"{label:26}: {med[k] * 1000:8.1f} ms   (rounds: {rounds} ms)")
    cold, warm = med["docker"] / med["cold"], med["docker"] / med["warm"]
    verdict = "PASS" if cold >= TARGET else "FAIL"
    print(f"ratio                     : {cold:.1f}x cold, {warm:.1f}x warm "
          f"(target >= {TARGET:g}x) {verdict}")


if __name__ == "__main__":
    main()
