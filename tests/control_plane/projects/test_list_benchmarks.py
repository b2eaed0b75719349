"""benchmarks/projects_list.py and benchmarks/slow_clients.py, in small: each
runs its whole setup (a real `berth serve`, the bare app, the load generators,
the slow sockets), prints its figures and a verdict, and its exit status follows
that verdict. The figures of so short a run mean nothing; that the scripts run does."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


def _run(script, *args):
    run = subprocess.run([sys.executable, str(BENCHMARKS / script), *args],
                         capture_output=True, text=True, timeout=240)
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    verdict = last.split()[-1] if last else ""
    assert verdict in ("PASS", "FAIL"), (run.stdout, run.stderr)
    assert run.returncode == (0 if verdict == "PASS" else 1), (run.stdout, run.stderr)
    return run.stdout


@pytest.mark.slow
def test_the_projects_list_benchmark_runs_and_its_status_follows_its_verdict():
    out = _run("projects_list.py", "--database", "sqlite", "--rounds", "1", "--seconds", "1",
               "--slices", "1", "--warmup", "0", "--concurrency", "2")
    assert re.search(r"^berth\s+: \d+ req/s .* CPU \d+ us/req", out, re.M), out
    assert re.search(r"^bare\s+: \d+ req/s .* CPU \d+ us/req", out, re.M), out
    assert re.search(r"^ratio\s+: \d+\.\d\d \(target >= 0\.75\)", out, re.M), out


@pytest.mark.slow
def test_the_slow_clients_benchmark_runs_and_its_status_follows_its_verdict():
    out = _run("slow_clients.py", "--rounds", "1", "--seconds", "1", "--slow", "20",
               "--ramp", "1", "--concurrency", "2")
    assert re.search(r"^alone\s+: \d+ req/s", out, re.M), out
    assert re.search(r"^slow\s+: \d+ req/s", out, re.M), out
    assert "20 slow connections held at the start" in out, out
    assert re.search(r"^ratio\s+: \d+\.\d\d \(target >= 0\.90\); worst p99", out, re.M), out
