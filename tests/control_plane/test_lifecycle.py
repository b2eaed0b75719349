"""The environment's lifecycle table (control_plane/vocabulary/lifecycle.py) against the
spec's rows and the decisions; the services' behaviour against it is the
model-based test's (tests/control_plane/deploys/test_lifecycle_model.py)."""

import itertools

import pytest

from control_plane.vocabulary import errors, lifecycle, states
from protocol.kinds import TaskKind

E, K = states.EnvironmentStatus, TaskKind


def test_the_spec_rows():
    # (none) -> deploying on create; stuck -> error; destroy completes -> pending.
    assert (None, E.DEPLOYING) in lifecycle.TRANSITIONS
    assert (E.DEPLOYING, E.ERROR) in lifecycle.TRANSITIONS
    assert lifecycle.rule(K.DESTROY).done == E.DESTROYED
    assert states.public_environment_status(E.DESTROYED) == E.PENDING
    # "any | destroy operation": from every status with no task of its own.
    assert lifecycle.rule(K.DESTROY).sources == lifecycle.IDLE


@pytest.mark.parametrize("status", sorted(lifecycle.IDLE))
def test_a_deploy_starts_from_every_idle_status(status):
    """A stopped environment with data is deployed again (it failed before)."""
    assert lifecycle.allowed(K.DEPLOY, status)
    assert lifecycle.allowed(K.REDEPLOY, status)


def test_an_action_that_would_change_nothing_is_refused():
    with pytest.raises(errors.InvalidTransition, match="not stopped"):
        lifecycle.check(K.START, E.RUNNING)
    with pytest.raises(errors.InvalidTransition, match="not running"):
        lifecycle.check(K.STOP, E.STOPPED)
    assert lifecycle.offered(E.RUNNING) == (K.DEPLOY, K.REDEPLOY, K.RESTART, K.STOP)
    assert lifecycle.offered(E.STOPPED) == (K.DEPLOY, K.REDEPLOY, K.START)
    assert lifecycle.offered(E.RUNNING, busy=True) == ()


def test_runtime_actions_need_containers_where_they_may_be_missing():
    """A first deploy that failed left no containers: start, stop and restart
    have nothing to act on; a deploy does."""
    for kind in (K.START, K.STOP, K.RESTART):
        assert lifecycle.allowed(kind, E.FAILED)
        assert not lifecycle.allowed(kind, E.FAILED, has_containers=False)
        with pytest.raises(errors.InvalidTransition, match="no containers"):
            lifecycle.check(kind, E.ERROR, has_containers=False)
    assert lifecycle.offered(E.FAILED, has_containers=False) == (K.DEPLOY, K.REDEPLOY)


def test_backups_refuse_with_environment_not_ready():
    with pytest.raises(errors.EnvironmentNotReady):
        lifecycle.check(K.BACKUP, E.PENDING)
    with pytest.raises(errors.EnvironmentNotReady):
        lifecycle.check(K.RESTORE, E.STOPPED)
    assert lifecycle.allowed(K.BACKUP, E.STOPPED)


def test_a_restore_shows_that_the_erp_does_not_serve():
    rule = lifecycle.rule(K.RESTORE)
    assert (rule.during, rule.done) == (E.DEPLOYING, E.RUNNING)
    assert rule.after(E.RUNNING, lifecycle.UNTOUCHED) == E.RUNNING
    # The agent puts a failed restore back (or rolls it back as it restarts).
    assert rule.after(E.RUNNING, lifecycle.TOUCHED) == E.RUNNING
    assert rule.after(E.RUNNING, lifecycle.TIMED_OUT) == E.ERROR


def test_an_untouched_failure_goes_back_unless_nothing_was_there():
    rule = lifecycle.rule(K.DEPLOY)
    assert rule.after(E.STOPPED, lifecycle.UNTOUCHED) == E.STOPPED
    assert rule.after(E.ERROR, lifecycle.UNTOUCHED) == E.ERROR
    assert rule.after(E.PENDING, lifecycle.UNTOUCHED) == E.FAILED
    assert rule.after(E.DESTROYED, lifecycle.UNTOUCHED) == E.FAILED
    assert rule.after(E.STOPPED, lifecycle.CANCELLED) == E.STOPPED
    assert rule.after(E.STOPPED, lifecycle.TIMED_OUT) == E.ERROR


def test_a_removal_of_a_destroyed_environment_that_does_not_succeed_leaves_it_destroyed():
    for kind in (K.DELETE, K.DESTROY):
        rule = lifecycle.rule(kind)
        for ending in set(lifecycle.ENDINGS) - {lifecycle.SUCCESS}:
            assert rule.after(E.DESTROYED, ending) == E.DESTROYED
        assert rule.after(E.RUNNING, lifecycle.TOUCHED) == E.FAILED
        assert rule.after(E.RUNNING, lifecycle.UNTOUCHED) == E.RUNNING


def test_tasks_that_do_not_move_the_environment_show_only_a_failure_on_the_server():
    stop = lifecycle.rule(K.STOP)
    assert stop.after(E.RUNNING, lifecycle.SUCCESS) == E.STOPPED
    assert stop.after(E.RUNNING, lifecycle.TOUCHED) == E.ERROR
    for ending in (lifecycle.UNTOUCHED, lifecycle.CANCELLED, lifecycle.TIMED_OUT):
        assert stop.after(E.RUNNING, ending) is None
    assert lifecycle.rule(K.BACKUP).after(E.RUNNING, lifecycle.TOUCHED) is None


@pytest.mark.parametrize("kind, status", list(itertools.product(lifecycle.RULES, E)))
def test_every_action_from_every_status_is_allowed_or_refused_with_a_409(kind, status):
    try:
        rule = lifecycle.check(kind, status)
    except errors.ApiError as exc:
        assert exc.status == 409 and exc.code in ("invalid_transition", "environment_not_ready")
        assert status not in lifecycle.rule(kind).sources
        return
    # Allowed: each move it makes is in the derived table.
    for target in (rule.during, rule.done, rule.after(status, lifecycle.TOUCHED)):
        after = rule.during or status
        if target and target != after:
            assert (after, target) in lifecycle.TRANSITIONS
    if rule.during:
        assert (status, rule.during) in lifecycle.TRANSITIONS
        assert (rule.during, status) in lifecycle.TRANSITIONS  # cancelled
        assert (rule.during, E.ERROR) in lifecycle.TRANSITIONS  # timed out


def test_nothing_leaves_deleted_and_every_status_is_reachable():
    assert not any(a == E.DELETED for a, _ in lifecycle.TRANSITIONS)
    reached, frontier = set(), {None}
    while frontier:
        reached |= frontier
        frontier = {b for a, b in lifecycle.TRANSITIONS if a in frontier} - reached
    assert reached - {None} == set(E)
    # Nothing pauses an environment yet: `paused` is only gone back to.
    assert {a for a, b in lifecycle.TRANSITIONS if b == E.PAUSED} == lifecycle.DURING
    with pytest.raises(errors.InvalidTransition):
        lifecycle.check_move(E.DELETED, E.DEPLOYING)


# --- the table in docs/decisions.md is this one -------------------------------------------

SHOWN = (E.PENDING, E.RUNNING, E.STOPPED, E.PAUSED, E.FAILED, E.ERROR, E.DESTROYED)
EVENTS = {K.DEPLOY: "deploy.*", K.REDEPLOY: "deploy.*", K.BACKUP: "backup.*",
          K.RESTORE: "restore.*", K.EXPORT: "none", K.DRILL: "backup.drill_*"}


def _cell(kind, status):
    if not lifecycle.allowed(kind, status):
        return "409"
    return "yes" if lifecycle.allowed(kind, status, has_containers=False) else "with containers"


def _ending(rule, how):
    if rule.removes and how == lifecycle.CANCELLED:
        return "not cancelled"
    before = next(s for s in (E.RUNNING, E.STOPPED) if s in rule.sources)
    after = rule.after(before, how)
    return "stays" if after is None else "as before" if after == before else after


def rendered_table():
    head = ["action", *(states.public_environment_status(s) if s != E.DESTROYED
                        else "destroyed (shown pending)" for s in SHOWN),
            "while it runs", "success"]
    rows = [head, ["---"] * len(head)]
    for kind, rule in lifecycle.RULES.items():
        rows.append([kind, *(_cell(kind, s) for s in SHOWN), rule.during or "stays",
                     rule.done or "stays"])
    endings = [["action", "failed after changing something", "failed before changing anything",
                "cancelled", "timed out", "events"], ["---"] * 6]
    for kind, rule in lifecycle.RULES.items():
        endings.append([kind, *(_ending(rule, how) for how in (
            lifecycle.TOUCHED, lifecycle.UNTOUCHED, lifecycle.CANCELLED, lifecycle.TIMED_OUT)),
            EVENTS.get(kind, "environment.* only")])
    return "\n\n".join("\n".join("| " + " | ".join(r) + " |" for r in t) for t in (rows, endings))


def test_the_decisions_show_this_table():
    from pathlib import Path

    decisions = (Path(__file__).parents[2] / "docs" / "decisions.md").read_text()
    assert rendered_table() in decisions, "docs/decisions.md's lifecycle tables should read:\n\n" \
        + rendered_table()
