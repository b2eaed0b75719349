"""Every state machine in one place: one declared transition table per
resource. A move not in its table is refused with the error the spec names."""

from control_plane.errors import ApiError, Conflict

# environment: (from, to) pairs allowed; "*" means from any status.
ENVIRONMENT = {
    (None, "deploying"),                       # created: the initial deployment is queued
    ("deploying", "running"), ("deploying", "failed"),
    ("running", "deploying"), ("stopped", "deploying"), ("failed", "deploying"),
    ("error", "deploying"),
    ("running", "stopped"), ("stopped", "running"),
    ("deploying", "error"), ("pending", "error"),   # stuck deployment (reaper)
    ("destroying", "error"),                   # stuck deletion (reaper)
    ("failed", "running"), ("error", "running"),  # started again after a failure
    ("failed", "stopped"), ("error", "stopped"),
    # a start, stop or restart that failed on the server: the containers are not
    # in the state asked for (runtime error)
    ("running", "error"), ("stopped", "error"), ("failed", "error"),
    ("*", "destroying"), ("destroying", "pending"), ("destroying", "deleted"),
    ("destroying", "failed"),
    ("pending", "deploying"),                  # a destroyed environment deployed again
    ("deploying", "stopped"), ("deploying", "pending"),  # cancel: back to the last stable state
}

# deployment (the public API's "task")
DEPLOYMENT = {
    (None, "pending"),
    ("pending", "running"),                    # the agent acknowledged it
    ("pending", "success"), ("running", "success"),
    ("pending", "failed"), ("running", "failed"),
    ("pending", "cancelled"), ("running", "cancelled"),
    (None, "destroyed"),
    ("pending", "destroyed"), ("running", "destroyed"),  # destroy (operations surface) done
}
DEPLOYMENT_TERMINAL = {"success", "failed", "cancelled", "destroyed"}

# How a deployment's status reads as a task status on the public API.
TASK_STATUS = {"pending": "queued", "queued": "queued", "building": "running",
               "deploying": "running", "running": "running", "success": "completed",
               "failed": "failed", "cancelled": "cancelled", "rolled_back": "completed",
               "destroyed": "completed"}

# webhook (`is_active`): paused after 10 consecutive failed deliveries or by PATCH,
# re-enabled by PATCH `is_active: true` (which also zeroes failure_count).
WEBHOOK = {("active", "paused"), ("paused", "active")}

TABLES = {"environment": ENVIRONMENT, "deployment": DEPLOYMENT, "webhook": WEBHOOK}


def check(resource, current, target):
    """Raise unless `current -> target` is in the resource's table."""
    table = TABLES[resource]
    if (current, target) in table or ("*", target) in table:
        return target
    raise Conflict(f"A {resource} cannot go from {current} to {target}.",
                   code="invalid_transition")


def can(resource, current, target):
    try:
        check(resource, current, target)
        return True
    except ApiError:
        return False
