"""The stuck-deployment reaper: a task queued or running for more than 30
minutes fails with a timeout message, its environment goes to `error`, its
agent command is withdrawn; each one exactly once, however many reapers run.
On both database backends."""

import threading

import pytest

from control_plane.infra.db import database
from control_plane.models import AgentCommand, Deployment, Environment, Event, TaskLogLine
from control_plane.services.tasks import engine, queue, reaper
from control_plane.vocabulary import lifecycle
from tests.conftest import auth

P = "/api/public/v1"


@pytest.fixture
def org_setup(world):
    """An organization with a project on a server, a full-access key (writes)
    and a read-only key (reads)."""
    org = world.org()
    project = world.project(org)
    return org, project, world.key(org)[0], world.key(org, "read_only")[0]


def queued(app, world, project, kind="deploy", env_status=None):
    """A task as `act` leaves it: the environment moved, the record and its command.
    `env_status`: the environment's status afterwards, whatever the task made it."""
    during = lifecycle.rule(kind).during  # created there: no move of its own to see
    env = world.environment(project, during or "running")
    d = engine.start(env, kind, berth=app.extensions["berth"], trigger="manual",
                     created=bool(during))
    if env_status:
        Environment.update(status=env_status).where(Environment.id == env.id).execute()
        env.status = env_status
    return env, d


def events(org, name):
    return [e for e in Event.select().where(Event.organization == org.id, Event.name == name)]


def test_stuck_deployment_fails_with_a_timeout(app, client, fake_clock, org_setup):
    org, project, raw, reader = org_setup
    env = client.post(f"{P}/projects/{project.id}/environments", headers=auth(raw),
                      json={"name": "Production"}).json
    task = client.get(f"{P}/environments/{env['id']}/status",
                      headers=auth(reader)).json["last_deploy"]["id"]
    command = AgentCommand.get(AgentCommand.deployment == task)
    assert command.status == "queued"  # its agent never came

    fake_clock.advance(minutes=31)
    assert [str(d) for d in reaper.reap()] == [task]

    t = client.get(f"{P}/deployments/{task}", headers=auth(reader)).json
    assert t["status"] == "failed" and t["completed_at"]
    assert "timed out after 30 minutes" in t["error_message"]
    assert client.get(f"{P}/environments/{env['id']}", headers=auth(reader)).json[
        "status"] == "error"
    status = client.get(f"{P}/environments/{env['id']}/status", headers=auth(reader)).json
    assert status["last_deploy"]["status"] == "failed"
    log = client.get(f"{P}/environments/{env['id']}/logs", headers=auth(reader)).json
    assert log["task_id"] == task and "timed out after 30 minutes" in log["log"]
    line = TaskLogLine.get(TaskLogLine.deployment == task)
    assert line.level == "error"

    [failed] = events(org, "deploy.failed")
    reason = failed.data.pop("error_message")
    assert "timed out after 30 minutes" in reason
    assert failed.data == {"environment_id": env["id"], "project_id": str(project.id),
                           "task_id": task, "kind": "deploy", "trigger": "manual",
                           "status": "failed", "duration_seconds": 31 * 60}
    moves = [(e.data["from"], e.data["to"]) for e in events(org, "environment.status_changed")]
    assert moves == [("deploying", "error")]
    # The command is withdrawn: the agent, when it connects, is not sent it.
    assert AgentCommand.get_by_id(command.id).status == "withdrawn"
    assert queue.undelivered(command.server_id, resync=True) == []
    assert str(command.server_id) not in queue.servers_with_pending()
    # No automatic retry; the environment can be deployed again by hand.
    assert Deployment.select().where(Deployment.environment == env["id"]).count() == 1
    again = client.post(f"{P}/environments/{env['id']}/actions/deploy", headers=auth(raw))
    assert again.status_code == 202, again.json
    assert reaper.reap() == []  # the new one has its own 30 minutes


def test_not_yet_past_the_cut_off(app, world, fake_clock, org_setup):
    org, project, _, _ = org_setup
    env, d = queued(app, world, project)
    fake_clock.advance(minutes=29)
    assert reaper.reap() == []
    assert Deployment.get_by_id(d.id).status == "pending"
    assert Environment.get_by_id(env.id).status == "deploying"
    assert events(org, "deploy.failed") == []
    fake_clock.advance(minutes=1, seconds=1)
    assert reaper.reap() == [d.id]


def test_a_running_deployment_counts_from_its_start(app, world, fake_clock, org_setup):
    """Queued for 20 minutes while the agent was away, then acknowledged: it gets
    its full 30 minutes of work."""
    org, project, _, _ = org_setup
    env, d = queued(app, world, project)
    command = AgentCommand.get(AgentCommand.deployment == d.id)
    fake_clock.advance(minutes=20)
    queue.mark_delivered(command.id)
    engine.record_ack(command.server_id, command.id.hex)
    assert Deployment.get_by_id(d.id).status == "running"
    fake_clock.advance(minutes=29)
    assert reaper.reap() == []
    fake_clock.advance(minutes=2)
    assert reaper.reap() == [d.id]
    done = Deployment.get_by_id(d.id)
    assert done.status == "failed" and done.error_message.startswith("Deployment timed out")
    assert done.completed_at == fake_clock.now
    assert AgentCommand.get_by_id(command.id).status == "withdrawn"  # no longer asked for
    assert [e.data["duration_seconds"] for e in events(org, "deploy.failed")] == [31 * 60]


def test_terminal_deployments_are_untouched(app, world, fake_clock, org_setup):
    org, project, _, _ = org_setup
    rows = {}
    for status in ("success", "failed", "cancelled", "destroyed"):
        env, d = queued(app, world, project, env_status="running")
        Deployment.update(status=status).where(Deployment.id == d.id).execute()
        rows[d.id] = (status, env.id)
    fake_clock.advance(hours=5)
    assert reaper.reap() == []
    for d_id, (status, env_id) in rows.items():
        d = Deployment.get_by_id(d_id)
        assert d.status == status and d.error_message is None and d.completed_at is None
        assert Environment.get_by_id(env_id).status == "running"
    assert Event.select().where(Event.organization == org.id,
                                Event.name != "environment.created").count() == 0


def test_environment_moves_only_out_of_a_transient_status(app, world, fake_clock, org_setup):
    """A stuck deletion leaves the environment in `error`; a stuck restart, which
    never moved it, leaves its status as it was."""
    org, project, _, _ = org_setup
    deleting, delete_task = queued(app, world, project, kind="delete")
    restarting, restart_task = queued(app, world, project, kind="restart")
    assert deleting.status == "destroying" and restarting.status == "running"
    fake_clock.advance(minutes=45)
    assert set(reaper.reap()) == {delete_task.id, restart_task.id}
    assert Environment.get_by_id(deleting.id).status == "error"
    assert Environment.get_by_id(restarting.id).status == "running"
    assert Deployment.get_by_id(restart_task.id).status == "failed"
    assert events(org, "deploy.failed") == []  # neither is a deployment of code
    assert len(events(org, "environment.status_changed")) == 1


def test_a_late_agent_reply_changes_nothing(app, world, fake_clock, org_setup):
    org, project, _, _ = org_setup
    env, d = queued(app, world, project)
    command = AgentCommand.get(AgentCommand.deployment == d.id)
    queue.mark_delivered(command.id)
    fake_clock.advance(minutes=31)
    assert reaper.reap() == [d.id]

    fake_clock.advance(minutes=5)
    server_id, cid = command.server_id, command.id.hex
    engine.record_ack(server_id, cid)  # the agent was slow, not gone
    queue.append_logs(server_id, [(cid, 1, "info", "started PostgreSQL")])
    engine.record_result(server_id, cid, True, {"erp_container": "c1", "db_container": "c2",
                                                 "git_commit": "a" * 40})
    after = Deployment.get_by_id(d.id)
    assert after.status == "failed" and after.started_at is None
    assert after.error_message.startswith("Deployment timed out")
    assert after.git_commit is None
    env = Environment.get_by_id(env.id)
    assert env.status == "error" and env.erp_container is None
    names = [e.name for e in Event.select().where(Event.organization == org.id)]
    assert names.count("deploy.failed") == 1
    assert "deploy.completed" not in names and "deploy.started" not in names
    # What the agent says it did stays on the command and in the log, for the
    # record; the timeout stays the log's last word.
    assert AgentCommand.get_by_id(command.id).status == "succeeded"
    lines = [(line.level, line.message) for line in TaskLogLine.select()
             .where(TaskLogLine.deployment == d.id).order_by(TaskLogLine.seq)]
    assert lines[0] == ("info", "started PostgreSQL")
    assert lines[1][0] == "error" and lines[1][1].startswith("Deployment timed out")


def test_a_reaper_that_lost_the_race_does_nothing(app, world, fake_clock, org_setup):
    org, project, _, _ = org_setup
    _, d = queued(app, world, project)
    fake_clock.advance(minutes=31)
    seen_by_both = reaper.stuck()
    assert reaper.reap() == [d.id]
    # The slower scheduler read the same rows before the first one claimed them.
    assert [reaper.reap_one(i, status, fake_clock.now) for i, status in seen_by_both] == [False]
    assert len(events(org, "deploy.failed")) == 1
    assert TaskLogLine.select().where(TaskLogLine.deployment == d.id).count() == 1


def test_two_reapers_racing_reap_each_deployment_once(app, world, fake_clock, org_setup):
    org, project, _, _ = org_setup
    tasks = [queued(app, world, project)[1].id for _ in range(8)]
    fake_clock.advance(minutes=31)
    start = threading.Barrier(2)
    results, errors = {}, []

    def run(name):
        try:
            seen = reaper.stuck()  # both read every row before either claims one
            if name == "b":
                seen.reverse()  # so that they meet in the middle
            start.wait(10)
            results[name] = [d for d, status in seen if reaper.reap_one(d, status,
                                                                        fake_clock.now)]
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            database.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert set(results["a"]).isdisjoint(results["b"])
    assert sorted(results["a"] + results["b"]) == sorted(tasks)
    failed = events(org, "deploy.failed")
    assert sorted(e.data["task_id"] for e in failed) == sorted(str(t) for t in tasks)
    assert all(Deployment.get_by_id(t).status == "failed" for t in tasks)
    for t in tasks:
        assert TaskLogLine.select().where(TaskLogLine.deployment == t).count() == 1
    assert len(events(org, "environment.status_changed")) == len(tasks)
