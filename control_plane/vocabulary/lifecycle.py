"""The environment's lifecycle, declared once: what each action does from each
status. The services ask it whether an action is allowed now (`check`), the task
engine what a task's start and end do to the environment (`rule`), the console
which buttons to offer (`offered`), and the model-based tests what to expect.
The environment's table of moves (`TRANSITIONS`) is derived from it.

An action is a task kind (protocol.kinds.TaskKind). From each status it is
either refused, with the error the API answers, or accepted: its task is queued
and the environment moves to `during` (if any) at once; then

- the agent succeeds: `done` (None: the status stays);
- the agent fails after changing something: `failed` (None: stays);
- the agent fails before changing anything (its result says `untouched`): back
  to the status before, if it served anything; from `pending` or `destroyed`
  (nothing was there) to `failed`;
- the task is cancelled (/api/v1): back to the status before the task;
- the task is timed out by the reaper: `error`, when the task had moved it
  (nothing says what it is now); otherwise it stays;
- a removal of an environment already destroyed that does not succeed leaves it
  destroyed (`Rule.after` says all of this once).

A task that is pending or running refuses every other action (409
`task_in_progress` on the public API, `deployment_in_progress` on /api/v1),
before this table is asked. A deleted environment is found by no surface (404).

Only deploys and redeploys emit `deploy.*` events (with their `kind`); every
status change emits `environment.status_changed`; a removal that completes
emits `environment.deleted`, and a destroyed environment deployed again
`environment.created` (the spec: "status changes emit environment.*").
"""

from dataclasses import dataclass

from control_plane.vocabulary import errors, states
from protocol.kinds import TaskKind

E, K = states.EnvironmentStatus, TaskKind
# How a task ends: the agent's success, its failure after changing something
# (touched) or before (untouched, its result says so), a cancel, the reaper.
SUCCESS, TOUCHED, UNTOUCHED, CANCELLED, TIMED_OUT = ENDINGS = (
    "success", "touched", "untouched", "cancelled", "timed_out")

# Where an action may start from: any status with no task of its own running.
IDLE = frozenset({E.PENDING, E.RUNNING, E.STOPPED, E.PAUSED, E.FAILED, E.ERROR, E.DESTROYED})
# Statuses in which the environment may or may not have its containers (a first
# deploy that failed has none): the runtime actions need them there.
UNCERTAIN = frozenset({E.FAILED, E.ERROR})
# Nothing was there to go back to: an untouched failure from these is `failed`.
NOTHING_SERVED = frozenset({E.PENDING, E.DESTROYED})
# A rule's `failed` that is no status: back to the status the task found.
AS_BEFORE = "as before"


@dataclass(frozen=True)
class Rule:
    kind: str
    sources: frozenset  # the statuses it may start from
    during: str | None = None  # the status while its task runs (None: unchanged)
    done: str | None = None  # once it succeeded (None: unchanged)
    failed: str | None = None  # the agent failed it after changing something
    needs_containers: bool = False  # from an UNCERTAIN status, only with containers
    deploy_events: bool = False  # its task sends deploy.started/completed/failed/cancelled
    refusal: type = errors.InvalidTransition  # the error when the status refuses it
    why: str = ""  # what the refusal tells the person

    @property
    def removes(self):
        """It takes the environment away (never cancelled)."""
        return self.done in (E.DELETED, E.DESTROYED)

    def after(self, before, how):
        """Where the environment goes when the task ends `how` (one of ENDINGS),
        having started from `before`; None: it stays as it is."""
        if how == SUCCESS:
            return self.done
        if self.during is None:  # it never moved: only what failed on the server shows
            return self.failed if how == TOUCHED else None
        if self.removes and before == E.DESTROYED:
            return E.DESTROYED  # its containers were gone already: it stays destroyed
        if how == CANCELLED:
            return before
        if how == TIMED_OUT:
            return E.ERROR  # nothing says what it is now
        if how == UNTOUCHED:
            return E.FAILED if before in NOTHING_SERVED else before
        return before if self.failed == AS_BEFORE else self.failed


_RUNTIME = dict(needs_containers=True, failed=E.ERROR)
_DATA = dict(needs_containers=True, refusal=errors.EnvironmentNotReady)

RULES = {rule.kind: rule for rule in (
    Rule(K.DEPLOY, IDLE, E.DEPLOYING, E.RUNNING, E.FAILED, deploy_events=True),
    Rule(K.REDEPLOY, IDLE, E.DEPLOYING, E.RUNNING, E.FAILED, deploy_events=True),
    Rule(K.RESTART, frozenset({E.RUNNING, E.PAUSED, E.FAILED, E.ERROR}), done=E.RUNNING,
         why="only a running or failed environment is restarted; start a stopped one",
         **_RUNTIME),
    Rule(K.START, frozenset({E.STOPPED, E.PAUSED, E.FAILED, E.ERROR}), done=E.RUNNING,
         why="it is not stopped (restart a running environment)", **_RUNTIME),
    Rule(K.STOP, frozenset({E.RUNNING, E.PAUSED, E.FAILED, E.ERROR}), done=E.STOPPED,
         why="it is not running", **_RUNTIME),
    Rule(K.DELETE, IDLE, E.DESTROYING, E.DELETED, E.FAILED),
    Rule(K.DESTROY, IDLE, E.DESTROYING, E.DESTROYED, E.FAILED),
    # Backups, restores and exports are tasks but not deployments. A backup of a
    # stopped environment starts its database for the dump and stops it again.
    Rule(K.BACKUP, frozenset({E.RUNNING, E.STOPPED}),
         why="only a running or stopped environment with its database is backed up", **_DATA),
    # The ERP is stopped while its data is replaced: `deploying` says it does not serve.
    # A restore that fails is put back from its safety backup by the agent (or rolled
    # back when it restarts, if a restart cut it short): it serves as before; the
    # task's error says if putting it back failed too.
    Rule(K.RESTORE, frozenset({E.RUNNING}), E.DEPLOYING, E.RUNNING, AS_BEFORE,
         why="only a running environment is restored", **_DATA),
    Rule(K.EXPORT, frozenset({E.RUNNING}), why="only a running environment is exported",
         **_DATA),
    # A drill restores a backup into a throwaway copy beside the environment, from
    # its images and configuration: the environment itself serves on, untouched.
    Rule(K.DRILL, frozenset({E.RUNNING}), why="only a running environment is drilled",
         **_DATA),
    # A build's tests (services/automation/builds.py): the ERP is stopped while they
    # run in a one-off container, and started again after, whatever they said.
    Rule(K.TEST, frozenset({E.RUNNING}), E.DEPLOYING, E.RUNNING, AS_BEFORE,
         why="only a running environment runs tests", **_DATA),
)}

# What the console offers, in its order: the actions a person starts there.
CONSOLE_ACTIONS = (K.DEPLOY, K.REDEPLOY, K.RESTART, K.START, K.STOP)


def rule(kind):
    return RULES[kind]


def allowed(kind, status, *, has_containers=True):
    """Whether the status lets the action start (no task in progress assumed)."""
    r = RULES[kind]
    return status in r.sources and not (r.needs_containers and status in UNCERTAIN
                                        and not has_containers)


def check(kind, status, *, has_containers=True):
    """Raise the rule's refusal unless `allowed`."""
    if allowed(kind, status, has_containers=has_containers):
        return RULES[kind]
    shown = states.public_environment_status(status)
    r = RULES[kind]
    if status in r.sources:  # an UNCERTAIN status without containers
        raise r.refusal(f"The environment is {shown} and has no containers (it was never "
                        f"deployed); deploy it before a {kind}.")
    why = f": {r.why}" if r.why else ""
    raise r.refusal(f"The environment is {shown}; a {kind} cannot start now{why}.")


def offered(status, *, has_containers=True, busy=False, kinds=CONSOLE_ACTIONS):
    """The actions allowed now, in `kinds`' order (none while a task runs)."""
    if busy:
        return ()
    return tuple(k for k in kinds if allowed(k, status, has_containers=has_containers))


def _derived():
    moves = {(None, E.DEPLOYING)}  # created: its first deployment is queued
    for r in RULES.values():
        for source in r.sources:
            if r.during is None:
                moves |= {(source, to) for to in (r.done, r.failed) if to}
                continue
            moves |= {(source, r.during), (r.during, source)}  # cancelled, untouched
        if r.during is not None:
            moves |= {(r.during, to) for to in (r.done, r.failed, E.FAILED, E.ERROR)
                      if to and to != AS_BEFORE}
    return frozenset((a, b) for a, b in moves if a != b)


# The environment's moves: (from, to). The reaper's move to `error` is from the
# statuses a task puts it in (`during`), as is a cancel's or an untouched
# failure's way back.
TRANSITIONS = _derived()
DURING = frozenset(r.during for r in RULES.values() if r.during)


def check_move(current, target):
    if (current, target) not in TRANSITIONS:
        raise errors.InvalidTransition(f"An environment cannot go from {current} to {target}.")
    return target
