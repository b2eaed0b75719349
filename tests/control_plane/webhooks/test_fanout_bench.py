"""benchmarks/webhook_fanout.py, in small: its exit status follows its verdict."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "webhook_fanout.py"


@pytest.mark.slow
@pytest.mark.parametrize("target, verdict, status", [
    (1, "PASS", 0),
    (10 ** 9, "FAIL", 1),  # unreachable: the run must fail, and say so
])
def test_the_benchmark_exits_non_zero_when_it_prints_fail(target, verdict, status):
    run = subprocess.run([sys.executable, str(SCRIPT), "--events", "20", "--rate", "100",
                          "--target", str(target)],
                         capture_output=True, text=True, timeout=120)
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith(f"{verdict}:"), (run.stdout, run.stderr)
    assert run.returncode == status, (run.stdout, run.stderr)
