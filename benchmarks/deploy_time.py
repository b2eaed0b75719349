"""Benchmark: time to deploy an environment, and to destroy it, end to end.

Starts the real `berth serve` (embedded SQLite) on a free port, registers a real
`berth-agent` with a registration token (`berth-agent register`), runs it
(`berth-agent run`) against the local Docker engine, and points the control plane
at the local test images (CP_ERP_IMAGE, CP_POSTGRES_IMAGE; build them with
scripts/build-test-images.sh). The project's add-ons come from a bare Git
repository this script creates, cloned over file://. Then, N times:

  deploy  - from `POST /api/public/v1/projects/{id}/environments` until the ERP
            answers `GET /web/health` with 200 at its address on the environment's
            network (found through the engine, by the berth.environment_id label;
            the ERP publishes no port). No proxy runs here (CP_PROXY_IMAGE empty):
            benchmarks/https_url.py measures the time to the environment's URL.
  destroy - from `DELETE /api/public/v1/environments/{id}` (X-Confirm-Delete: true)
            until its task is `completed` and no container of it is left

Reports the median and min/max of each against the targets (deploy < 10 s,
destroy < 5 s), PASS/FAIL. `--updates N` then measures a module update's cost:
on one environment whose add-on `shop` is installed, N redeploys of a commit
that raises shop's manifest version (an update: `odoo -u shop`) alternate with N
of a commit that changes no version (no update), each from `POST
/environments/{id}/actions/deploy` to its task `completed` (both take the
pre-deploy backup); it prints both medians, the difference and the ratio.
`--requirements N` alike alternates N redeploys of a commit with a
requirements.txt (`psycopg2`, which the ERP image already has: no index needed)
whose image was built before (the first one, untimed, builds it) with N of a
commit without one: the target is under 1 s more with the requirements. `--steps` adds where the deploy time goes: the
median gap before each of the agent's task-log lines (as the control plane
received them). Everything it made is removed at the end. Always exits 0.

    python benchmarks/deploy_time.py [--runs 5] [--steps] [--json] [--updates N] [--requirements N]
"""

import argparse
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.serve import Served  # noqa: E402

TARGETS = {"deploy": 10.0, "destroy": 5.0}
ERP_IMAGE, POSTGRES_IMAGE = "berth-test-erp:latest", "berth-test-postgres:latest"
AGENT = str(Path(sys.executable).with_name("berth-agent"))
API = "/api/public/v1"
READERS = 4  # read-only keys polled in turn (120 requests a minute each)
POLL = 0.05


class Bench:
    environment_fields = {}  # more of a deployed environment's (its `environment_type`)

    def __init__(self, tmp, settings=None):
        self.tmp = Path(tmp)
        self.served = Served(self.tmp / "cp", {"CP_ERP_IMAGE": ERP_IMAGE,
                                               "CP_POSTGRES_IMAGE": POSTGRES_IMAGE,
                                               "CP_PROXY_IMAGE": "", **(settings or {})})
        self.agent_extra_env = {}
        self.docker = docker.from_env(timeout=60)
        self.agent = None
        self.env_ids = []
        self.reads = 0
        self.rate_waits = 0.0  # seconds slept on 429s (the full-access key: 20 a minute)

    # --- setup ---------------------------------------------------------------

    def start(self):
        for image in (ERP_IMAGE, POSTGRES_IMAGE):
            try:
                self.docker.images.get(image)
            except docker.errors.ImageNotFound:
                raise SystemExit(f"{image} is missing: run scripts/build-test-images.sh") from None
        s = self.served
        org = s.admin("org", "create", "--name", "bench")["id"]
        self.writer = s.admin("key", "create", "--org", org, "--name", "bench", "--type",
                              "full_access", "--scope", "organization",
                              "--server-registration")["key"]
        self.readers = [s.admin("key", "create", "--org", org, "--name", f"bench-ro{i}", "--type",
                                "read_only", "--scope", "organization")["key"]
                        for i in range(READERS)]
        s.start()
        server_id = self._register_agent()
        project = self.api("POST", "/projects", json={"name": "bench", "server_id": server_id})
        self.project_id = project.json()["id"]
        # The API takes HTTPS repositories only; the benchmark's is a local one.
        with self._db() as db:
            db.execute("UPDATE project SET git_repo_url = ? WHERE id = ?",
                       (f"file://{self._repository()}", uuid.UUID(self.project_id).hex))
        return self

    def _register_agent(self):
        token = self.api("POST", "/servers/registration-tokens",
                         json={"server_name": "bench"}).json()["token"]
        agent_dir = self.tmp / "agent"
        self.agent_env = {**os.environ, "BERTH_AGENT_CONFIG": str(agent_dir / "agent.json"),
                          "BERTH_AGENT_DATA_DIR": str(agent_dir / "data"),
                          "BERTH_AGENT_ENV_ROOT": str(self.tmp / "srv"),
                          # the benchmark's repository is a local one
                          "BERTH_AGENT_GIT_PROTOCOLS": "https:ssh:file", **self.agent_extra_env}
        subprocess.run([AGENT, "register", "--control-plane", self.served.url, "--token-file", "-"],
                       input=token, env=self.agent_env, check=True, capture_output=True, text=True)
        self.agent_log = open(agent_dir / "agent.log", "w")
        self.agent = subprocess.Popen([AGENT, "run"], env=self.agent_env, stdout=self.agent_log,
                                      stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while subprocess.run([AGENT, "status"], env=self.agent_env,
                             capture_output=True).returncode != 0:
            if time.monotonic() > deadline or self.agent.poll() is not None:
                raise SystemExit("the agent did not connect:\n" + (agent_dir / "agent.log").read_text())
            time.sleep(0.2)
        return json.loads((agent_dir / "agent.json").read_text())["server_id"]

    def _repository(self):
        work, bare = self.tmp / "work", self.tmp / "addons.git"
        work.mkdir()
        (work / "shop").mkdir()
        (work / "shop" / "__manifest__.py").write_text('{"name": "Shop", "version": "1.0"}')
        for cmd in (["git", "init", "-q", "--initial-branch=main"],
                    ["git", "-c", "user.email=b@example.com", "-c", "user.name=b", "add", "-A"],
                    ["git", "-c", "user.email=b@example.com", "-c", "user.name=b",
                     "commit", "-qm", "v1"],
                    ["git", "init", "-q", "--bare", str(bare)],
                    ["git", "push", "-q", str(bare), "main"]):
            subprocess.run(cmd, cwd=work, check=True)
        return bare

    def commit(self, version, note, requirements=None):
        """A new commit of the add-ons: shop at `version`, a note file changed, a
        requirements.txt with `requirements` (none when None)."""
        work = self.tmp / "work"
        if requirements is None:
            (work / "requirements.txt").unlink(missing_ok=True)
        else:
            (work / "requirements.txt").write_text(requirements)
        (work / "shop" / "__manifest__.py").write_text(
            f'{{"name": "Shop", "version": "{version}"}}')
        (work / "shop" / "NOTE").write_text(note)
        git = ["git", "-c", "user.email=b@example.com", "-c", "user.name=b"]
        for cmd in ([*git, "add", "-A"], [*git, "commit", "-qm", note],
                    ["git", "push", "-q", str(self.tmp / "addons.git"), "main"]):
            subprocess.run(cmd, cwd=work, check=True)

    def install_shop(self, env_id):
        """shop installed in the environment's database, as from the ERP's apps."""
        db = next(c for c in self._labeled(env_id) if c.labels.get("berth.role") == "postgres")
        code, out = db.exec_run(["psql", "-X", "-U", "odoo", "-d", "odoo", "-c",
                                 "UPDATE ir_module_module SET state = 'installed' "
                                 "WHERE name = 'shop'"])
        if code != 0:
            raise SystemExit(out.decode())

    def redeploy(self, env_id):
        started, waited = time.perf_counter(), self.rate_waits
        task_id = self.api("POST", f"/environments/{env_id}/actions/deploy").json()["task_id"]
        task = self._task(task_id, timeout=300)
        return time.perf_counter() - started - (self.rate_waits - waited), task

    def _db(self):
        return sqlite3.connect(self.served.env["CP_DATA_DIR"] + "/berth.sqlite3", timeout=30)

    # --- HTTP ------------------------------------------------------------------

    def api(self, method, path, key=None, **kwargs):
        headers = {"Authorization": f"Bearer {key or self.writer}", **kwargs.pop("headers", {})}
        while True:
            r = requests.request(method, self.served.url + API + path, headers=headers,
                                 timeout=30, **kwargs)
            if r.status_code != 429:
                if r.status_code >= 400:
                    raise SystemExit(f"{method} {path}: {r.status_code} {r.text}")
                return r
            pause = float(r.headers.get("Retry-After", 1))
            self.rate_waits += pause  # a timed span leaves these out
            time.sleep(pause)

    def read(self, path):
        self.reads += 1
        return self.api("GET", path, key=self.readers[self.reads % READERS]).json()

    # --- one round -------------------------------------------------------------

    def _labeled(self, env_id):
        try:
            return self.docker.containers.list(
                all=True, filters={"label": f"berth.environment_id={env_id}"})
        except docker.errors.NotFound:  # one went between listing and inspecting: look again
            return []

    def erp_address(self, env_id):
        """`ip:8069` of the running ERP container on its environment's network."""
        for c in self._labeled(env_id):
            networks = c.attrs["NetworkSettings"]["Networks"] or {}
            ip = next((n["IPAddress"] for n in networks.values() if n.get("IPAddress")), None)
            if c.labels.get("berth.role") == "erp" and c.status == "running" and ip:
                return f"{ip}:8069"
        return None

    def _wait(self, predicate, timeout, what, every=POLL):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(every)
        raise SystemExit(f"timed out after {timeout} s waiting for {what}")

    def _task(self, task_id, timeout=120):
        task = self._wait(lambda: (t := self.read(f"/deployments/{task_id}"))["status"]
                          in ("completed", "failed") and t, timeout, f"task {task_id}")
        if task["status"] != "completed":
            raise SystemExit(f"task {task_id} failed: {task['error_message']}")
        return task

    def deploy(self, n):
        started = time.perf_counter()
        env = self.api("POST", f"/projects/{self.project_id}/environments",
                       json={"name": f"bench-{n}", **self.environment_fields}).json()
        self.env_ids.append(env["id"])

        def healthy():
            address = self.erp_address(env["id"])
            if address is None:
                return False
            try:
                return requests.get(f"http://{address}/web/health",
                                    timeout=2).status_code == 200
            except requests.RequestException:
                return False

        self._wait(healthy, 120, "the ERP to answer")
        elapsed = time.perf_counter() - started
        task_id = self.read(f"/environments/{env['id']}/status")["last_deploy"]["id"]
        self._task(task_id)  # and it did succeed
        return env["id"], task_id, elapsed

    def destroy(self, env_id):
        started = time.perf_counter()
        accepted = self.api("DELETE", f"/environments/{env_id}",
                            headers={"X-Confirm-Delete": "true"}).json()
        self._wait(lambda: self.read(accepted["poll_url"][len(API):])["status"]
                   in ("completed", "failed"), 120, "the destroy task")
        self._task(accepted["task_id"])
        self._wait(lambda: not self._labeled(env_id), 30, "the containers to go")
        return time.perf_counter() - started

    def steps(self, task_ids):
        """Median gap before each task-log line, by its message with numbers masked."""
        gaps = {}
        with self._db() as db:
            for task_id in task_ids:
                rows = db.execute(
                    "SELECT l.message, l.created_at, d.created_at FROM task_log_line l "
                    "JOIN deployment d ON d.id = l.deployment_id WHERE l.deployment_id = ? "
                    "ORDER BY l.seq", (uuid.UUID(task_id).hex,)).fetchall()
                previous = None
                for message, at, queued in rows:
                    at = _ts(at)
                    step = re.sub(r"file://\S+", "<repo>", message)
                    step = re.sub(r"\b[0-9a-f]{7,}\b|\d+", "#", step)[:60]
                    gaps.setdefault(step, []).append(at - (previous or _ts(queued)))
                    previous = at
        return {step: statistics.median(v) for step, v in gaps.items()}

    # --- teardown ----------------------------------------------------------------

    def close(self):
        if self.agent is not None:
            self.agent.terminate()
            try:
                self.agent.wait(15)
            except subprocess.TimeoutExpired:
                self.agent.kill()
            self.agent_log.close()
        if getattr(self.served, "proc", None) is not None:
            self.served.stop()
        from agent.deploy.environments import Environments

        envs = Environments(self.docker, root=self.tmp / "srv")
        for env_id in self.env_ids:
            if self._labeled(env_id):
                envs.destroy(env_id, True, lambda *a: None)
        self.docker.close()


def _ts(text):
    import datetime as dt

    return dt.datetime.fromisoformat(text).timestamp()


def summary(samples):
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "samples": [round(s, 3) for s in samples]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", action="store_true", help="where the deploy time goes")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--updates", type=int, default=0,
                        help="redeploys with and without a module update, N of each")
    parser.add_argument("--requirements", type=int, default=0,
                        help="redeploys with unchanged requirements and without, N of each")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="berth-deploy-bench-")
    bench = Bench(tmp)
    times = {"deploy": [], "destroy": []}
    tasks = []
    try:
        bench.start()
        for n in range(args.runs):
            env_id, task_id, took = bench.deploy(n)
            times["deploy"].append(took)
            tasks.append(task_id)
            times["destroy"].append(bench.destroy(env_id))
            if not args.json:
                print(f"run {n + 1}: deploy {took:6.2f} s   destroy {times['destroy'][-1]:6.2f} s",
                      file=sys.stderr)
        steps = bench.steps(tasks) if args.steps else None
        updates = _updates(bench, args.updates) if args.updates else None
        reqs = _requirements(bench, args.requirements) if args.requirements else None
    finally:
        bench.close()
        shutil.rmtree(tmp, ignore_errors=True)

    report = {}
    for what, samples in times.items():
        s = summary(samples)
        s["target"] = TARGETS[what]
        s["pass"] = s["median"] < TARGETS[what]
        report[what] = s
    if args.json:
        print(json.dumps({"runs": args.runs, **report, **({"steps": steps} if steps else {})},
                         indent=2))
        return
    print(f"deploy = POST environment -> ERP answers /web/health; destroy = DELETE -> task "
          f"completed, containers gone ({args.runs} runs)")
    print(f"{'':8} {'median':>8} {'min':>8} {'max':>8}   target")
    for what, s in report.items():
        print(f"{what:8} {s['median']:7.2f}s {s['min']:7.2f}s {s['max']:7.2f}s   "
              f"< {s['target']:g} s {'PASS' if s['pass'] else 'FAIL'}")
    if steps:
        print("deploy steps (median gap before each task-log line):")
        for step, gap in steps.items():
            print(f"  {gap:6.2f} s  {step}")
    if updates:
        with_update, without = (statistics.median(updates[k]) for k in ("update", "none"))
        print(f"redeploy with a module update {with_update:6.2f} s, without {without:6.2f} s "
              f"(medians of {args.updates}): the update costs {with_update - without:+.2f} s, "
              f"ratio {with_update / without:.2f}")
    if reqs:
        with_reqs, without = (statistics.median(reqs[k]) for k in ("requirements", "none"))
        extra = with_reqs - without
        print(f"redeploy with unchanged requirements {with_reqs:6.2f} s, without any "
              f"{without:6.2f} s (medians of {args.requirements}): {extra:+.2f} s "
              f"(target < 1 s) {'PASS' if extra < 1 else 'FAIL'}")


def _requirements(bench, n):
    """Redeploys alternating a commit whose requirements' image exists with one
    that has no requirements.txt; their times by kind."""
    env_id, _, _ = bench.deploy("requirements")
    bench.commit("1.0", "requirements warm-up", requirements="psycopg2\n")
    bench.redeploy(env_id)  # builds the image: not timed
    times = {"requirements": [], "none": []}
    for i in range(n):
        for kind in ("requirements", "none") if i % 2 == 0 else ("none", "requirements"):
            bench.commit("1.0", f"{kind} {i}",
                         requirements="psycopg2\n" if kind == "requirements" else None)
            took, _ = bench.redeploy(env_id)
            times[kind].append(took)
            print(f"redeploy {kind:12} {took:6.2f} s", file=sys.stderr)
    return times


def _updates(bench, n):
    """Redeploys of one environment, alternating a commit that raises shop's version
    (an update) with one that changes no version; their times by kind."""
    env_id, _, _ = bench.deploy("updates")
    bench.install_shop(env_id)
    times = {"update": [], "none": []}
    for i in range(n):
        for kind in ("update", "none") if i % 2 == 0 else ("none", "update"):
            version = f"1.{len(times['update']) + (kind == 'update')}"
            bench.commit(version, f"{kind} {i}")
            took, task = bench.redeploy(env_id)
            times[kind].append(took)
            print(f"redeploy {kind:6} {took:6.2f} s (shop {version})", file=sys.stderr)
    return times


if __name__ == "__main__":
    main()
