"""The one way tests wait: poll what can be observed until it holds. A test never
sleeps for a while and then asserts; it waits for the condition it needs (or, for
time itself, moves a controllable clock)."""

import time


def wait_for(predicate, *, what, timeout=20, interval=0.05, detail=None):
    """The first truthy value `predicate()` returns, asked every `interval` seconds.
    After `timeout` seconds an AssertionError naming `what` was waited for, with
    `detail()` when given (what explains a failure: the last answer, a log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    message = f"timed out after {timeout} s waiting for {what}"
    raise AssertionError(message if detail is None else f"{message}:\n{detail()}")
