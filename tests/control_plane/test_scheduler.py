"""The scheduler: its loop, `berth scheduler` as a real process (two at once
too), and the scheduler inside `berth serve`; on both database backends."""

import datetime as dt
import os
import signal
import subprocess
import threading
import time

import pytest

from control_plane.infra import clock
from control_plane.models import Deployment, Event
from control_plane.scheduler import Job, Scheduler
from control_plane.services.tasks import engine
from tests.support.agents import wait_for
from tests.support.serve import BERTH, Served

RUNNING = ("scheduler running (reaper every 1 s, webhooks every 0.25 s, housekeeping every 3600 s, "
           "backup-uploads every 300 s, backup-schedule every 60 s, "
           "backup-retention every 3600 s, wal-watch every 30 s, wal-retention every 3600 s, "
           "import-retention every 3600 s, automation every 5 s, "
           "fleet-alerts every 15 s, metric-history every 300 s, size-growth every 900 s, commit-statuses every 5 s, agent-upgrades every 5 s, ssh-servers every 30 s)")


def test_jobs_run_at_start_then_every_interval_and_failures_do_not_stop_the_loop(caplog):
    runs = {"ok": 0, "boom": 0}

    def ok():
        runs["ok"] += 1

    def boom():
        runs["boom"] += 1
        raise RuntimeError("job exploded")

    scheduler = Scheduler([Job("ok", 0.05, ok), Job("boom", 0.05, boom)]).start_in_thread()
    try:
        wait_for(lambda: runs["ok"] >= 4 and runs["boom"] >= 4, timeout=10,
                 what="both jobs run again and again")
    finally:
        started = time.monotonic()
        scheduler.stop()
    assert time.monotonic() - started < 2 and not scheduler.thread.is_alive()
    assert "scheduled job boom failed" in caplog.text and "job exploded" in caplog.text


def test_stop_does_not_wait_for_the_next_turn():
    ran = threading.Event()
    scheduler = Scheduler([Job("slow-turns", 3600, ran.set)]).start_in_thread()
    assert ran.wait(10)  # the first run is at once
    started = time.monotonic()
    scheduler.stop()
    assert time.monotonic() - started < 2 and not scheduler.thread.is_alive()


def test_a_nudged_job_takes_its_next_turn_now():
    """A service's nudge (a build's next stage): the job runs again at once, not at
    its interval, also when the nudge came while it ran; other jobs keep theirs."""
    from control_plane.infra import nudge

    runs = {"hourly": 0, "other": 0}
    first = threading.Event()

    def hourly():
        runs["hourly"] += 1
        if runs["hourly"] == 1:
            nudge.nudge("hourly")  # while it runs: it runs again after
        first.set()

    scheduler = Scheduler([Job("hourly", 3600, hourly),
                           Job("other", 3600, lambda: runs.__setitem__("other", runs["other"] + 1))])
    scheduler.start_in_thread()
    try:
        assert first.wait(10)
        wait_for(lambda: runs["hourly"] == 2, timeout=5, what="the run the nudge asked for")
        started = time.monotonic()
        nudge.nudge("hourly")
        nudge.nudge("no-such-job")
        wait_for(lambda: runs["hourly"] == 3, timeout=5, what="a nudge between turns")
        assert time.monotonic() - started < 2 and runs["other"] == 1
    finally:
        scheduler.stop()
    assert not scheduler.thread.is_alive()
    nudge.nudge("hourly")  # a stopped scheduler no longer listens: nothing to wake
    assert runs["hourly"] == 3 and not scheduler.woken.is_set()


@pytest.fixture
def process_env(app, backend):
    """The environment of a `berth` process on the test's database."""
    env = {**os.environ, "CP_DATA_DIR": app.config["DATA_DIR"],
           "CP_SECRET_KEY": app.config["SECRET_KEY"], "CP_REAPER_INTERVAL_SECONDS": "1"}
    if backend == "postgres":
        env["CP_DATABASE_URL"] = app.config["DATABASE_URL"]
    return env


def stuck(app, world, project, minutes=31):
    """A deployment queued `minutes` ago whose agent never came."""
    env = world.environment(project, "deploying")  # created with its first deployment
    d = engine.start(env, "deploy", berth=app.extensions["berth"], trigger="manual",
                     created=True)
    Deployment.update(created_at=clock.now() - dt.timedelta(minutes=minutes)).where(
        Deployment.id == d.id).execute()
    return d


def status(d):
    return Deployment.get_by_id(d.id).status


class SchedulerProcess:
    def __init__(self, env, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([BERTH, "scheduler"], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def text(self):
        return self.log_path.read_text()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(15)
            self.log.close()


def test_berth_scheduler_reaps_and_stops_on_sigterm(app, world, process_env, tmp_path):
    org = world.org()
    project = world.project(org)
    early = stuck(app, world, project)  # stuck before the scheduler starts
    recent = stuck(app, world, project, minutes=10)
    proc = SchedulerProcess(process_env, tmp_path / "scheduler.log")
    try:
        wait_for(lambda: status(early) == "failed", timeout=30, what="reaped at start")
        late = stuck(app, world, project)  # stuck while it runs: the next turn takes it
        wait_for(lambda: status(late) == "failed", timeout=30, what="reaped on a later turn")
        assert status(recent) == "pending"
        assert RUNNING in proc.text()
        assert "reaped 1 stuck deployment(s)" in proc.text()
    finally:
        code = proc.stop(signal.SIGTERM)
    assert code == 0, proc.text()
    assert "scheduler stopping (SIGTERM)" in proc.text()
    assert Deployment.get_by_id(early.id).error_message == "Deployment timed out after 30 minutes"


def test_sigint_stops_it_too(app, process_env, tmp_path):
    proc = SchedulerProcess(process_env, tmp_path / "scheduler.log")
    try:
        wait_for(lambda: "scheduler running" in proc.text(), timeout=30, what="started")
    finally:
        code = proc.stop(signal.SIGINT)
    assert code == 0 and "scheduler stopping (SIGINT)" in proc.text(), proc.text()


def test_no_thread_of_it_but_the_waiting_one_can_take_a_stop_signal(process_env, tmp_path):
    """A SIGTERM or SIGINT arriving before the main thread waits for it must stay
    pending for it: a thread with them unblocked would take it (SIGTERM: the process
    dies mid-job; SIGINT: KeyboardInterrupt, exit 1). Read from the kernel's view of
    each thread; the main thread shows them unblocked while it waits in sigwait."""
    proc = SchedulerProcess(process_env, tmp_path / "scheduler.log")
    stop_bits = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    try:
        wait_for(lambda: "scheduler running" in proc.text(), timeout=30, what="started")
        tasks = f"/proc/{proc.proc.pid}/task"
        wait_for(lambda: len(os.listdir(tasks)) >= 3, timeout=10, what="its threads")
        blocked = {}
        for tid in os.listdir(tasks):
            if int(tid) == proc.proc.pid:
                continue
            with open(f"{tasks}/{tid}/comm") as comm, open(f"{tasks}/{tid}/status") as status:
                mask = next(line for line in status if line.startswith("SigBlk:"))
                blocked[comm.read().strip() + tid] = int(mask.split()[1], 16) & stop_bits
        assert blocked and all(bits == stop_bits for bits in blocked.values()), blocked
    finally:
        code = proc.stop(signal.SIGTERM)
    assert code == 0, proc.text()


def test_two_schedulers_reap_each_deployment_once(app, world, process_env, tmp_path):
    org = world.org()
    project = world.project(org)
    procs = [SchedulerProcess(process_env, tmp_path / f"scheduler-{n}.log") for n in range(2)]
    try:
        wait_for(lambda: all("scheduler running" in p.text() for p in procs), timeout=30,
                 what="both started")
        tasks = [stuck(app, world, project) for _ in range(12)]
        wait_for(lambda: all(status(d) == "failed" for d in tasks), timeout=60,
                 what="all reaped")
        time.sleep(1.5)  # one more turn each: nothing is reaped twice
    finally:
        codes = [p.stop() for p in procs]
    assert codes == [0, 0]
    failed = Event.select().where(Event.organization == org.id, Event.name == "deploy.failed")
    assert sorted(e.data["task_id"] for e in failed) == sorted(str(d.id) for d in tasks)


def test_berth_serve_runs_the_scheduler(app, world, process_env, tmp_path):
    org = world.org()
    project = world.project(org)
    early = stuck(app, world, project)
    served = Served(tmp_path / "served", {k: v for k, v in process_env.items()
                                          if k.startswith("CP_")}).start()
    try:
        wait_for(lambda: status(early) == "failed", timeout=30, what="reaped at start")
        late = stuck(app, world, project)
        wait_for(lambda: status(late) == "failed", timeout=30, what="reaped while serving")
    finally:
        log = served.stop()
    assert RUNNING in log
