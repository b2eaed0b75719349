"""Periodic jobs: a background thread in `berth serve`, its own process in
`berth scheduler`.

Every job must be safe when several schedulers run it at the same time (scale-out
runs one per replica): it claims each row it acts on with a conditional UPDATE
and acts only on the rows its own UPDATE changed. A job that raises is logged;
the loop goes on and runs it again at its next turn."""

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from control_plane.infra import nudge

log = logging.getLogger("berth.scheduler")


@dataclass(frozen=True)
class Job:
    name: str
    every: float  # seconds between two runs
    run: Callable[[], object]


BACKUP_SCHEDULE_SECONDS = 60  # a scheduled backup starts within a minute of its time
BACKUP_RETENTION_SECONDS = 3600
WAL_WATCH_SECONDS = 30  # archiving that fails is alerted within this of being seen
AUTOMATION_SECONDS = 5  # event runs start, and schedules fire, within this of being due
UPGRADE_SECONDS = 5  # a free rollout slot is filled within this
ALERT_SECONDS = 15  # a due fleet alert goes out within this (after its own delay)
HISTORY_SECONDS = 300  # metric history: hours rolled up, old points deleted
GROWTH_SECONDS = 900  # as often as agents measure disk use
COMMIT_STATUS_SECONDS = 5  # a build's result on its commit within seconds


def jobs(berth):
    """Every periodic job of the control plane; adding one is one line here.
    `berth`: the services' context (agent_link.Context), the app's or a plain one."""
    from control_plane.services import housekeeping
    from control_plane.services.automation import triggers
    from control_plane.services.backups import policy, retention, transfers, wal
    from control_plane.services.servers import alerts, history, sizes, upgrades
    from control_plane.services.tasks import reaper
    from control_plane.services.webhooks import commit_statuses, delivery

    settings = berth.settings
    return [
        Job("reaper", settings["REAPER_INTERVAL_SECONDS"], reaper.reap),
        Job("webhooks", float(settings["WEBHOOK_POLL_SECONDS"]),
            lambda: delivery.run(berth, linger=delivery.LINGER_SECONDS)),
        Job("housekeeping", 3600, lambda: housekeeping.run(settings["AUDIT_RETENTION_DAYS"])),
        Job("backup-uploads", 300, lambda: transfers.abort_unfinished(berth)),
        Job("backup-schedule", BACKUP_SCHEDULE_SECONDS, lambda: policy.run(berth)),
        Job("backup-retention", BACKUP_RETENTION_SECONDS, lambda: retention.sweep(berth)),
        Job("wal-watch", WAL_WATCH_SECONDS, wal.watch),
        Job("wal-retention", BACKUP_RETENTION_SECONDS, lambda: wal.sweep(berth)),
        Job("import-retention", BACKUP_RETENTION_SECONDS,
            lambda: retention.sweep_imports(berth)),
        Job("automation", AUTOMATION_SECONDS, lambda: triggers.run(berth)),
        Job("fleet-alerts", ALERT_SECONDS, lambda: alerts.sweep(berth)),
        Job("metric-history", HISTORY_SECONDS, lambda: history.sweep(berth)),
        Job("size-growth", GROWTH_SECONDS, lambda: sizes.watch_growth(berth)),
        Job("commit-statuses", COMMIT_STATUS_SECONDS, lambda: commit_statuses.run(berth)),
        Job("agent-upgrades", UPGRADE_SECONDS, lambda: upgrades.roll_out(berth)),
        # Servers reached over SSH: reachable or not, and their due commands (the
        # checks run on the SSH link's own loop; the job only starts them).
        Job("ssh-servers", settings["SSH_CHECK_SECONDS"],
            lambda: berth.ssh.check_all(claim_for=settings["SSH_CHECK_SECONDS"])
            if getattr(berth, "ssh", None) else None),
    ]


class Scheduler:
    """Runs each job once at start (work left over while no scheduler ran is
    picked up at once), then every `job.every` seconds, one job at a time."""

    def __init__(self, jobs, monotonic=time.monotonic):
        self.jobs = list(jobs)
        self.stopping = threading.Event()
        self.woken = threading.Event()  # a nudge or the stop
        self.monotonic = monotonic
        self.thread = None
        self.due = {}

    def run(self):
        """Until `stop()`; returns promptly once asked. A nudge (infra/nudge.py) of a
        job makes its next turn now."""
        self.due = due = {job.name: self.monotonic() for job in self.jobs}
        nudge.listen(self.soon)
        try:
            while not self.stopping.is_set():
                for job in self.jobs:
                    if self.stopping.is_set():
                        break
                    if self.monotonic() >= due[job.name]:
                        due[job.name] = math.inf  # a nudge meanwhile makes it due again
                        self._run_one(job)
                        if due[job.name] == math.inf:
                            due[job.name] = self.monotonic() + job.every
                if due:
                    self.woken.wait(max(0.0, min(due.values()) - self.monotonic()))
                else:
                    self.woken.wait()
                self.woken.clear()
        finally:
            nudge.forget(self.soon)

    def soon(self, job_name):
        """(From any thread.) The job's next turn now, if this scheduler runs it."""
        if job_name in self.due:
            self.due[job_name] = self.monotonic()
            self.woken.set()

    def _run_one(self, job):
        from control_plane.infra.db import database, is_sqlite
        from control_plane.infra.observability import timed_job

        try:
            timed_job(job.name, job.run)
        except Exception:
            log.exception("scheduled job %s failed; it runs again in %s s", job.name, job.every)
        finally:
            # PostgreSQL: this thread's connection goes back to the pool between
            # turns. SQLite has no pool: reopening the file (and its pragmas) would
            # cost more than a quiet turn's work, so the thread keeps its own.
            try:
                if not is_sqlite():
                    database.close()
            except Exception:
                log.debug("closing the scheduler's connection failed", exc_info=True)

    def start_in_thread(self):
        """Embedded mode: a daemon thread (a kill loses nothing: each claim is its
        own transaction)."""
        self.thread = threading.Thread(target=self.run, name="berth-scheduler", daemon=True)
        self.thread.start()
        return self

    def stop(self, timeout=10):
        self.stopping.set()
        self.woken.set()
        if self.thread is not None:
            self.thread.join(timeout)


def describe(jobs):
    return ", ".join(f"{job.name} every {job.every:g} s" for job in jobs)
