"""A service asks for a scheduler job's next turn now rather than at its interval
(a build's next stage, a commit status to send). Only a scheduler in this process
hears it (`berth serve`, embedded); elsewhere the job's own interval stands."""

import logging

log = logging.getLogger("berth")
_listeners = []


def listen(callback):
    """`callback(job_name)`: called on each nudge (a scheduler, as it starts)."""
    _listeners.append(callback)
    return callback


def forget(callback):
    if callback in _listeners:
        _listeners.remove(callback)


def nudge(job_name):
    for callback in list(_listeners):
        try:
            callback(job_name)
        except Exception:
            log.exception("a nudge of %s failed", job_name)
