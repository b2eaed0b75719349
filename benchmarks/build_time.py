"""Benchmark: a build of one changed module against a neutralised copy of production,
from the push to the status its forge received, against a plain deploy.

The whole product path, nothing stood in: the real `berth serve` (embedded SQLite,
its gateway and scheduler), a real `berth-agent run`, the local test images, and an
HTTPS stub of GitHub's commit status API (the forge) on loopback. A production
environment is deployed and filled (as benchmarks/backup_restore.py fills one: a
filestore of text-like and random files and a database grown with generate_series)
to `--size-mb` (default 1024, half each), then backed up. A `test` rule copies that
backup into each build (`source_environment_id`, neutralised), and the project
reports to the stub.

Each round pushes a new branch whose commit adds a module with one passing test,
and takes from the signed push (`POST /api/v1/webhooks/github`) to the stub's
receipt of `success` for that commit, split by the control plane's own records of
the build's tasks into:

  create   - the build's environment made and deployed at the commit
  restore  - the source's backup restored into it and neutralised (its safety
             backup included)
  install  - the test task less its tests: the ERP stopped, `odoo -i <module>
             --test-enable --test-tags /<module> --stop-after-init` loading the
             module, the ERP started again
  tests    - the tests' own time, from the ERP's log (`Module m loaded in X s
             (incl. Y s test)`)
  waits    - the rest: the scheduler's turns between the stages and the status
             job's, until the stub received the status
  teardown - after the status: the passing build's environment removed (shown,
             not in the total)

and a plain deploy (a new environment created and deployed until its ERP answers,
benchmarks/deploy_time.py's figure) is taken in each round beside it. Target: the
build's own overhead, everything but restore and tests (create + install + waits),
at most 1.5x the plain deploy (median of the rounds). Prints the phases with their
shares, PASS or FAIL (exit 1 on FAIL).

    python benchmarks/build_time.py [--rounds 3] [--size-mb 1024] [--small] [--json]
"""

import argparse
import hashlib
import hmac
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backup_restore import MB, BackupBench  # noqa: E402
from deploy_time import _ts  # noqa: E402

from tests.support.webhook_receiver import Receiver, _ca  # noqa: E402

TARGET = 1.5
TEST = '''from odoo.tests import TransactionCase


class TestBench(TransactionCase):

    def test_admin(self):
        self.assertEqual(self.env.user.login, "admin")
'''
LOADED = re.compile(r"Module (\w+) loaded in ([\d.]+)s \(incl\. ([\d.]+)s test\)")


class BuildBench(BackupBench):
    def start(self):
        super().start()
        from control_plane.app import create_app
        from control_plane.services.projects import git_push

        app = create_app({"DATA_DIR": self.served.env["CP_DATA_DIR"], "PROXY_IMAGE": ""})
        with app.extensions["berth"].db.connection_context():
            self.secret = git_push.issue_secret(uuid.UUID(self.project_id),
                                                public_url="https://b.test")["secret"]
        return self

    def branch(self, name):
        """A commit of a new branch from main, adding a module with one passing test."""
        work = self.tmp / "work"
        git = ["git", "-c", "user.email=b@example.com", "-c", "user.name=b"]
        subprocess.run(["git", "checkout", "-q", "-B", name, "main"], cwd=work, check=True)
        module = work / "bench_mod"
        (module / "tests").mkdir(parents=True, exist_ok=True)
        (module / "__init__.py").write_text("")
        (module / "__manifest__.py").write_text(repr({"name": "Bench", "version": "1.0",
                                                      "depends": ["base"], "note": name}))
        (module / "tests" / "__init__.py").write_text("from . import test_bench\n")
        (module / "tests" / "test_bench.py").write_text(TEST)
        for cmd in ([*git, "add", "-A"], [*git, "commit", "-qm", name],
                    ["git", "push", "-q", "-f", str(self.tmp / "addons.git"), name]):
            subprocess.run(cmd, cwd=work, check=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True,
                              capture_output=True, text=True).stdout.strip()

    def push(self, branch, commit):
        with self._db() as db:
            url = db.execute("SELECT git_repo_url FROM project WHERE id = ?",
                             (uuid.UUID(self.project_id).hex,)).fetchone()[0]
        from control_plane.services.projects.addon_repositories import full_name_of

        body = json.dumps({"ref": f"refs/heads/{branch}", "before": "0" * 40, "after": commit,
                           "commits": [], "pusher": {"name": "bench"},
                           "repository": {"full_name": full_name_of(url)}}).encode()
        signature = hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        import requests

        r = requests.post(f"{self.served.url}/api/v1/webhooks/github",
                          params={"project_id": self.project_id}, data=body, timeout=30,
                          headers={"Content-Type": "application/json",
                                   "X-GitHub-Event": "push",
                                   "X-GitHub-Delivery": str(uuid.uuid4()),
                                   "X-Hub-Signature-256": f"sha256={signature}"})
        if r.status_code != 200:
            raise SystemExit(f"the push was refused: {r.status_code} {r.text}")

    def build_of(self, commit):
        with self._db() as db:
            row = db.execute("SELECT id, status, environment_id, log FROM build WHERE \"commit\" = ?",
                             (commit,)).fetchone()
        return row

    def close(self):
        """Builds' environments too (a passing build's is removed by Berth itself)."""
        srv = self.tmp / "srv"
        self.env_ids += [p.name for p in srv.iterdir() if p.is_dir()] if srv.exists() else []
        self.env_ids = list(dict.fromkeys(self.env_ids))
        super().close()

    def tasks(self, env_hex):
        """{kind: (created, started, completed)} of the build environment's tasks."""
        with self._db() as db:
            rows = db.execute("SELECT kind, created_at, started_at, completed_at FROM deployment"
                              " WHERE environment_id = ? ORDER BY created_at",
                              (env_hex,)).fetchall()
        return {kind: tuple(_ts(t) if t else None for t in times) for kind, *times in rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--small", action="store_true", help="a quick run: 100 MB")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    size = 100 if args.small else args.size_mb

    def say(text):
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    ca, ca_path = _ca()
    forge = Receiver(ca)
    tmp = Path(tempfile.mkdtemp(prefix="berth-build-bench-"))
    bench = BuildBench(tmp, {"CP_WEBHOOK_ALLOW_PRIVATE": "true", "CP_WEBHOOK_CA_BUNDLE": ca_path})
    rounds = []
    try:
        bench.start()
        fs_bytes, db_bytes = bench.fill(size // 2, size // 2)
        say(f"production: filestore {fs_bytes / MB:.0f} MB, database {db_bytes / MB:.0f} MB")
        backup = bench._ops("POST", f"/environments/{bench.env_id}/backups", json={})
        bench._wait(lambda: bench._backup_done(backup["id"]), 1800, "the source's backup",
                    every=1)
        bench.api("POST", f"/projects/{bench.project_id}/automation-rules", json={
            "name": "builds", "trigger": {"type": "git_push", "branch": "bench/*"},
            "action": {"type": "test", "source_environment_id": bench.env_id}})
        bench.api("PUT", f"/projects/{bench.project_id}/forge", json={
            "provider": "github", "token": "bench", "api_url": forge.url})
        for n in range(args.rounds):
            plain_first = n % 2 == 0
            figures = {}
            for step in (("plain", "build") if plain_first else ("build", "plain")):
                if step == "plain":
                    env_id, _, took = bench.deploy(n + 1)
                    figures["plain"] = took
                    bench.destroy(env_id)
                    continue
                commit = bench.branch(f"bench/round-{n}")
                pushed = time.time()
                bench.push(f"bench/round-{n}", commit)

                def reported(commit=commit):
                    got = [json.loads(r.body) for r in forge.requests
                           if r.path.endswith(commit)]
                    ended = [g for g in got if g["state"] != "pending"]
                    return ended and (ended[-1], time.time())
                status, at = bench._wait(reported, 1800, "the commit status", every=0.1)
                if status["state"] != "success":
                    raise SystemExit(f"the build did not pass: {status}")
                build_id, _, env_hex, log = bench.build_of(commit)
                tasks = bench.tasks(env_hex)
                create, copy, test = tasks["deploy"], tasks["restore"], tasks["test"]
                tests = sum(float(m[2]) for m in LOADED.findall(log or ""))
                figures.update(total=at - pushed, create=create[2] - create[0],
                               restore=copy[2] - copy[0], tests=tests,
                               install=(test[2] - test[0]) - tests)
                figures["waits"] = figures["total"] - sum(
                    figures[k] for k in ("create", "restore", "install", "tests"))
                removed = bench._wait(lambda env_hex=env_hex: (t := bench.tasks(env_hex).get(
                    "delete")) and t[2] and t, 600, "the build's environment removed", every=0.5)
                figures["teardown"] = removed[2] - removed[0]
            figures["overhead"] = figures["create"] + figures["install"] + figures["waits"]
            figures["ratio"] = figures["overhead"] / figures["plain"]
            rounds.append(figures)
            say(f"round {n + 1}: " + "  ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    finally:
        forge.close()
        bench.close()
        shutil.rmtree(tmp, ignore_errors=True)
    median = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    ok = median["ratio"] <= TARGET
    if args.json:
        print(json.dumps({"size_mb": size, "rounds": rounds, "median": median, "pass": ok}))
    else:
        total = median["total"]
        print(f"build of one changed module on a {size} MB neutralised copy, median of "
              f"{len(rounds)} rounds: push to status {total:.1f} s")
        for k in ("create", "restore", "install", "tests", "waits"):
            print(f"  {k:<9}{median[k]:7.1f} s  {100 * median[k] / total:5.1f} %")
        print(f"  teardown {median['teardown']:7.1f} s  (after the status)")
        print(f"plain deploy {median['plain']:.1f} s; the build's own overhead "
              f"(create + install + waits) {median['overhead']:.1f} s = "
              f"{median['ratio']:.2f}x (target <= {TARGET}x): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
