"""`--wait`: following a task (a deployment, backup, restore or deletion) by
polling `/deployments/{task_id}` and its environment's task log, printing each
log line once as it arrives."""

import time

from berthctl.errors import ApiError, TaskFailed
from berthctl.output import echo

TERMINAL = ("completed", "failed", "cancelled")
LOG_LINES = 5000  # the most the log endpoint returns
INTERVAL = 1.0


class LogTail:
    """The lines of a log already printed. The endpoint returns the newest
    lines; once a log outgrows its window, the new lines are those after where
    the last printed ones reappear."""

    def __init__(self):
        self.seen = []

    def new_lines(self, lines, truncated):
        if not truncated:
            fresh = lines[len(self.seen):]
        else:
            fresh = lines[overlap(self.seen, lines):]
        self.seen.extend(fresh)
        del self.seen[:-LOG_LINES]
        return fresh


def overlap(old, new):
    """How many of `new`'s first lines are `old`'s last ones (the longest match)."""
    for k in range(min(len(old), len(new)), 0, -1):
        if old[-k:] == new[:k]:
            return k
    return 0


def follow(client, env_id, task_id, echo, interval=INTERVAL):
    """Print the task's log lines with `echo` until the task ends; return the task.
    Raises TaskFailed with the task's error message when it fails."""
    tail, logs_readable, task = LogTail(), True, None
    while True:
        task = client.get(f"/deployments/{task_id}")
        if logs_readable:  # a deleted environment's logs answer 404 once it is gone
            try:
                log = client.get(f"/environments/{env_id}/logs", task_id=task_id,
                                 lines=LOG_LINES)
            except ApiError as err:
                if err.status != 404:
                    raise
                logs_readable = False
            else:
                lines = log["log"].split("\n") if log["log"] else []
                for line in tail.new_lines(lines, log["truncated"]):
                    echo(line)
        if task["status"] in TERMINAL:
            break
        time.sleep(_pace(client, interval))
    if task["status"] != "completed":
        reason = task.get("error_message") or f"the task ended {task['status']}"
        raise TaskFailed(f"Task {task_id} {task['status']}: {reason}")
    return task


def _pace(client, interval):
    """Poll at `interval` while the key's window has room; when it runs low,
    spread the two requests of a poll over the window instead of hitting 429."""
    if client.rate:
        limit, remaining = client.rate
        if remaining < 6 and limit:
            return max(interval, 2 * 60 / limit)
    return interval


def echo_for(ctx_obj):
    """Log lines go to stdout, except with `--output json`, where stdout holds
    only the JSON document printed at the end."""
    err = ctx_obj.output == "json"
    return lambda line: echo(line, err=err, tabs=True)
