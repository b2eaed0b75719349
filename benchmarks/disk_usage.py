"""Disk measurement cost: a filestore laid out as the ERP lays it out (256
directories of content-addressed files), measured by the agent's Tree: the
first (full) walk, a pass over the unchanged tree, and a pass after one new
file, with the page cache warm.

    python benchmarks/disk_usage.py [--files 100000] [--size 2048]"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=2048, help="bytes per file")
    args = parser.parse_args()

    from agent.metrics import disk_walk
    from agent.metrics.disk_walk import Tree

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "filestore"
        data = os.urandom(args.size)
        for i in range(args.files):
            d = root / "odoo" / f"{i % 256:02x}"
            if i < 256:
                d.mkdir(parents=True)
            (d / f"{i:040x}").write_bytes(data)
        old = time.time() - 3600  # settled: not "changed in the last seconds"
        for dirpath, _, _ in os.walk(root):
            os.utime(dirpath, (old, old))
        tree = Tree(str(root))
        figure, full = timed(tree.measure)
        _, quiet = timed(tree.measure)
        assert tree.walks == 1
        (root / "odoo" / "00" / "new").write_bytes(data)
        os.utime(root / "odoo" / "00", (old + 1, old + 1))
        _, changed = timed(tree.measure)
        assert tree.walks == 2
        print(f"{args.files} files of {args.size} B in 256 directories: {figure / 2**20:.1f} MB "
              f"allocated (pauses of {disk_walk.PACE_SLEEP_S * 1000:g} ms every "
              f"{disk_walk.PACE_EVERY} entries included)")
        print(f"  first walk:          {full * 1000:8.1f} ms")
        print(f"  unchanged tree:      {quiet * 1000:8.1f} ms (directories read, no file stat)")
        print(f"  after one new file:  {changed * 1000:8.1f} ms (check, then a full walk)")


if __name__ == "__main__":
    main()
