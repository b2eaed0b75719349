"""Every status and state machine in one place: a StrEnum per resource and one
declared transition table each. A move not in its table is refused with the
error the spec names.

StrEnum members compare equal to their strings, so stored values, JSON and the
public `status` fields are the same strings as before."""

from enum import StrEnum

from control_plane.vocabulary.errors import ApiError, InvalidTransition


class EnvironmentStatus(StrEnum):
    PENDING = "pending"          # created, never deployed yet
    DEPLOYING = "deploying"
    RUNNING = "running"
    STOPPED = "stopped"
    PAUSED = "paused"            # the spec's "paused by the platform"; nothing pauses yet
    FAILED = "failed"
    ERROR = "error"
    DESTROYING = "destroying"
    DESTROYED = "destroyed"      # destroyed on the operations surface; may be deployed again
    DELETED = "deleted"          # deleted on the public API; gone for good


class DeploymentStatus(StrEnum):
    """A deployment record, as the operations surface shows it, in the spec's
    order. QUEUED, BUILDING, DEPLOYING and ROLLED_BACK are the spec's values that
    no path produces (FILTER_ONLY): a task waits as `pending`, runs as `running`
    (the agent reports no build phases), and a rollback is a new deployment that
    leaves its target `success`. They are accepted as list filters and find
    nothing (docs/decisions.md)."""
    PENDING = "pending"
    QUEUED = "queued"
    BUILDING = "building"
    DEPLOYING = "deploying"
    RUNNING = "running"          # the agent acknowledged it
    SUCCESS = "success"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ROLLED_BACK = "rolled_back"
    DESTROYED = "destroyed"


class Trigger(StrEnum):
    """What started a task (the spec's trigger values). SCHEDULED: a backup the
    environment's policy took. WEBHOOK is the spec's too; no path records it yet."""
    MANUAL = "manual"
    GIT_PUSH = "git_push"
    WEBHOOK = "webhook"
    SCHEDULED = "scheduled"
    ROLLBACK = "rollback"
    AUTO_DEPLOY = "auto_deploy"
    DESTROY = "destroy"
    CONFIG_UPDATE = "config_update"


class TaskStatus(StrEnum):
    """A deployment record, as the public API shows it (a "task"). PENDING: its
    server's agent is not connected, so nothing was dispatched (`task_status`)."""
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class CommandStatus(StrEnum):
    """A durable agent command (services/tasks/queue.py)."""
    QUEUED = "queued"
    DELIVERED = "delivered"
    ACKED = "acked"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    WITHDRAWN = "withdrawn"      # its deployment was cancelled or timed out


class Connection(StrEnum):
    """How the control plane reaches a server (`Server.connection`)."""
    AGENT = "agent"  # a resident agent holds a gRPC stream to the gateway
    SSH = "ssh"      # the control plane calls `berth-agent` over SSH, one call at a time


class UpgradeStatus(StrEnum):
    """An agent's upgrade to the control plane's version (services/servers/upgrades.py)."""
    QUEUED = "queued"        # asked for; waits for a rollout slot and a connected agent
    SENT = "sent"            # its command is on the way; the agent installs and restarts
    SUCCEEDED = "succeeded"  # the new version connected
    FAILED = "failed"        # it could not install, or rolled back, or never answered


class TokenStatus(StrEnum):
    """A registration token. EXPIRED is never stored: a pending token past its
    `expires_at` reads as expired."""
    PENDING = "pending"
    CONSUMED = "consumed"
    REVOKED = "revoked"
    EXPIRED = "expired"


class KeyStatus(StrEnum):
    """An API key, derived from its `revoked_at` and `expires_at`."""
    ACTIVE = "active"
    REVOKED = "revoked"
    EXPIRED = "expired"


class WebhookState(StrEnum):
    """A webhook subscription, stored as its `is_active` flag."""
    ACTIVE = "active"
    PAUSED = "paused"


class DeliveryStatus(StrEnum):
    RETRYING = "retrying"
    DELIVERED = "delivered"
    FAILED = "failed"


class RunStatus(StrEnum):
    """An automation rule's run (services/automation/runs.py)."""
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"


class AutomationTrigger(StrEnum):
    """What fired an automation rule's run (its `trigger_type`): a rule's own trigger is
    one of the last three; MANUAL is a run asked for (POST …/run, `berth admin rule run`)."""
    MANUAL = "manual"
    GIT_PUSH = "git_push"
    SCHEDULE = "schedule"
    EVENT = "event"


class AutomationAction(StrEnum):
    """What an automation rule does."""
    DEPLOY = "deploy"
    BACKUP = "backup"
    COPY_DATABASE = "copy_database"  # a backup of one environment restored into another
    PREVIEW = "preview"  # an environment for each pushed branch
    TEST = "test"  # a build of each push: the changed modules' tests (automation/builds.py)


class BackupStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class BackupType(StrEnum):
    MANUAL = "manual"            # asked for (a restore's safety backup too)
    SCHEDULED = "scheduled"      # taken by the environment's backup policy
    PRE_DEPLOY = "pre_deploy"    # taken by a deploy before it touches anything


class ImportStatus(StrEnum):
    """An upload to restore (services/backups/odoo.py); from `uploaded` on, what
    its newest restore task says."""
    UPLOADING = "uploading"
    UPLOADED = "uploaded"
    RESTORING = "restoring"
    RESTORED = "restored"
    FAILED = "failed"


class DomainStatus(StrEnum):
    """A custom domain (services/environment_settings/domains.py): `pending` until DNS shows
    its record, then `verified`; it never goes back (removal deletes it)."""
    PENDING = "pending"
    VERIFIED = "verified"


class TicketStatus(StrEnum):
    OPEN = "open"
    IN_PROGRESS = "in_progress"
    WAITING_FOR_CUSTOMER = "waiting_for_customer"
    WAITING_FOR_ADMIN = "waiting_for_admin"
    RESOLVED = "resolved"
    CLOSED = "closed"


E, D, C, T, B = EnvironmentStatus, DeploymentStatus, CommandStatus, TokenStatus, BackupStatus

# The environment's table of moves is control_plane/vocabulary/lifecycle.py's (derived from
# what each action does from each status).

# `Environment.is_active` is not a second state: it is false exactly when the
# status is one of these or the environment's project was deleted (which leaves
# the status as it was). It is stored for the indexed lists; see `is_active`.
INACTIVE = frozenset({E.DESTROYED, E.DELETED})

# How an environment's status reads where the spec fixes the values: a destroyed
# environment is `pending` there ("destroy ... completes -> pending").
PUBLIC_ENVIRONMENT_STATUS = {E.DESTROYED: E.PENDING}

# deployment (the public API's "task")
DEPLOYMENT = {
    (None, D.PENDING),
    (D.PENDING, D.RUNNING),                    # the agent acknowledged it
    (D.PENDING, D.SUCCESS), (D.RUNNING, D.SUCCESS),
    (D.PENDING, D.FAILED), (D.RUNNING, D.FAILED),
    (D.PENDING, D.CANCELLED), (D.RUNNING, D.CANCELLED),
    (None, D.DESTROYED),
    (D.PENDING, D.DESTROYED), (D.RUNNING, D.DESTROYED),  # destroy (operations surface) done
}
FILTER_ONLY = frozenset({D.QUEUED, D.BUILDING, D.DEPLOYING, D.ROLLED_BACK})
DEPLOYMENT_TERMINAL = frozenset({D.SUCCESS, D.FAILED, D.CANCELLED, D.DESTROYED})
DEPLOYMENT_IN_PROGRESS = (D.PENDING, D.RUNNING)

# How a deployment's status reads as a task status on the public API.
TASK_STATUS = {D.PENDING: TaskStatus.QUEUED, D.QUEUED: TaskStatus.QUEUED,
               D.BUILDING: TaskStatus.RUNNING, D.DEPLOYING: TaskStatus.RUNNING,
               D.RUNNING: TaskStatus.RUNNING, D.SUCCESS: TaskStatus.COMPLETED,
               D.FAILED: TaskStatus.FAILED, D.CANCELLED: TaskStatus.CANCELLED,
               D.ROLLED_BACK: TaskStatus.COMPLETED, D.DESTROYED: TaskStatus.COMPLETED}

# The spec's five task statuses: all the status snapshot's `last_deploy.status`
# may show. A cancelled deployment reads `failed` there (it did not complete);
# its `outcome` says `cancelled`. The task poll endpoint shows `cancelled` itself.
SNAPSHOT_TASK_STATUSES = (TaskStatus.PENDING, TaskStatus.QUEUED, TaskStatus.RUNNING,
                          TaskStatus.COMPLETED, TaskStatus.FAILED)

# agent command: queued -> delivered (again on each new stream) -> acked ->
# succeeded | failed; withdrawn (its deployment was cancelled or timed out) from
# any of the first three. A result that comes without an acknowledgement, or
# after the withdrawal, is still recorded on the command.
COMMAND = {
    (None, C.QUEUED),
    (C.QUEUED, C.DELIVERED), (C.DELIVERED, C.DELIVERED),
    (C.QUEUED, C.ACKED), (C.DELIVERED, C.ACKED),
    *((source, C.WITHDRAWN) for source in (C.QUEUED, C.DELIVERED, C.ACKED)),
    *((source, result) for source in (C.QUEUED, C.DELIVERED, C.ACKED, C.WITHDRAWN)
      for result in (C.SUCCEEDED, C.FAILED)),
}
COMMAND_UNDELIVERED = (C.QUEUED, C.DELIVERED)  # not acknowledged yet: sent on every stream

# registration token: each move is one conditional UPDATE, so a token is
# consumed or revoked at most once even under races. "expired" is derived.
REGISTRATION_TOKEN = {
    (None, T.PENDING),
    (T.PENDING, T.CONSUMED),                   # the agent registers, before expiry
    (T.PENDING, T.REVOKED),                    # DELETE, before expiry
}

# webhook (`is_active`): paused after 10 consecutive failed deliveries or by PATCH,
# re-enabled by PATCH `is_active: true` (which also zeroes failure_count).
WEBHOOK = {(WebhookState.ACTIVE, WebhookState.PAUSED),
           (WebhookState.PAUSED, WebhookState.ACTIVE)}

# webhook delivery: retried with backoff until delivered or out of attempts.
DELIVERY = {
    (None, DeliveryStatus.RETRYING),
    (DeliveryStatus.RETRYING, DeliveryStatus.RETRYING),
    (DeliveryStatus.RETRYING, DeliveryStatus.DELIVERED),
    (DeliveryStatus.RETRYING, DeliveryStatus.FAILED),
}

# backup: it follows its task (kind `backup`, or the `restore` a safety backup
# belongs to). A completed backup stays completed: retention removes its objects
# and sets `deleted_at` (`expired` is no status of the spec).
BACKUP = {
    (None, B.PENDING),
    (B.PENDING, B.RUNNING),                    # the agent acknowledged its task
    (B.PENDING, B.COMPLETED), (B.RUNNING, B.COMPLETED),
    (B.PENDING, B.FAILED), (B.RUNNING, B.FAILED),
    (B.PENDING, B.CANCELLED), (B.RUNNING, B.CANCELLED),
}
BACKUP_TERMINAL = frozenset({B.COMPLETED, B.FAILED, B.CANCELLED})
BACKUP_IN_PROGRESS = (B.PENDING, B.RUNNING)

# automation run: running while its action's task runs (or, for a two-step action,
# its tasks); it ends with the task's outcome, or skipped when the action could not start.
R = RunStatus
RUN = {(None, R.RUNNING), (R.RUNNING, R.COMPLETED), (R.RUNNING, R.FAILED),
       (R.RUNNING, R.SKIPPED)}

# agent upgrade: one rollout slot per `sent`; a new request for the same server
# replaces a queued one, never one in flight.
U = UpgradeStatus
UPGRADE = {(None, U.QUEUED), (U.QUEUED, U.SENT), (U.SENT, U.SUCCEEDED), (U.SENT, U.FAILED),
           (U.QUEUED, U.FAILED)}  # the agent cannot upgrade itself (too old)

DOMAIN = {
    (None, DomainStatus.PENDING),
    (DomainStatus.PENDING, DomainStatus.VERIFIED),  # its TXT record or CNAME was seen
}

TABLES = {"domain": DOMAIN, "deployment": DEPLOYMENT, "command": COMMAND,
          "registration_token": REGISTRATION_TOKEN, "webhook": WEBHOOK, "delivery": DELIVERY,
          "backup": BACKUP, "automation_run": RUN, "upgrade": UPGRADE}


def check(resource, current, target):
    """Raise unless `current -> target` is in the resource's table."""
    table = TABLES[resource]
    if (current, target) in table or ("*", target) in table:
        return target
    raise InvalidTransition(f"A {resource} cannot go from {current} to {target}.")


def can(resource, current, target):
    try:
        check(resource, current, target)
        return True
    except ApiError:
        return False


def sources(resource, target):
    """The statuses a move to `target` may start from, for the WHERE clause of a
    conditional UPDATE (the table decides, the database makes it atomic)."""
    return tuple(sorted(source for source, to in TABLES[resource]
                        if to == target and source not in (None, "*")))


def is_active(status, project_deleted=False):
    """What `Environment.is_active` holds for an environment in `status`."""
    return status not in INACTIVE and not project_deleted


def public_environment_status(status):
    return PUBLIC_ENVIRONMENT_STATUS.get(status, status)


def task_status(status, *, agent_connected=True):
    """A deployment's status as a task status: `pending` while it waits for an
    agent that is not connected (nothing was dispatched), `queued` once the
    agent is there to take it."""
    if status == D.PENDING and not agent_connected:
        return TaskStatus.PENDING
    return TASK_STATUS.get(status, status)


def snapshot_task_status(status, *, agent_connected=True):
    """`task_status` within the spec's five values (a cancelled task is `failed`)."""
    shown = task_status(status, agent_connected=agent_connected)
    return TaskStatus.FAILED if shown == TaskStatus.CANCELLED else shown


def task_outcome(status):
    """How a task ended, as the poll endpoint names it; None while it is not over."""
    return TASK_STATUS[status] if status in DEPLOYMENT_TERMINAL else None


def webhook_state(is_active):
    return WebhookState.ACTIVE if is_active else WebhookState.PAUSED
