"""Size and growth: a protocol-level agent's disk report (what the size is made of)
over real gRPC to the real gateway, read back through GET /environments/{id}/size
with the backups' stored sizes and the growth over a day; the growth watch's alert,
once per episode and once among schedulers. The agent's measurement itself, on real
containers, is tests/e2e/servers/test_sizes.py."""

import datetime as dt
import time

import pytest

from control_plane.agent_link import Plain
from control_plane.infra import clock
from control_plane.models import Backup, Environment, EnvironmentMetric, Event
from control_plane.services.servers import monitoring, sizes
from protocol.v1 import agent_pb2 as pb
from tests.conftest import auth
from tests.support.agents import wait_for
from tests.support.protocol_agent import placed_environment

P = "/api/public/v1"
MB = 1024 * 1024
TABLES = [pb.TableSize(name="ir_attachment", bytes=9 * MB, rows=1200),
          pb.TableSize(name="res_partner", bytes=2 * MB, rows=-1)]


@pytest.fixture
def fleet(world, gateway):
    with placed_environment(world, gateway) as (org, server, _, env, raw, agent):
        yield org, server, env, raw, agent


def size(client, raw, env_id):
    r = client.get(f"{P}/environments/{env_id}/size", headers=auth(raw))
    assert r.status_code == 200, r.json
    return r.json


def report(env_id, **fields):
    return pb.AgentMessage(disk=pb.DiskReport(environments=[pb.EnvironmentDisk(
        environment_id=str(env_id), measured_at_unix_ms=int(time.time() * 1000), **fields)]))


def test_what_the_size_is_made_of_is_kept_and_shown(client, world, fleet):
    org, server, env, raw, agent = fleet
    assert size(client, raw, env.id) == {
        "environment_id": str(env.id), "measured_at": None, "database_bytes": None,
        "filestore_bytes": None, "addons_bytes": None, "largest_tables": None,
        "filestore_files": None, "attachments_missing": None, "files_orphaned": None,
        "missing_sample": None, "backups": [], "growth": None}
    agent.send(report(env.id, database_bytes=40 * MB, filestore_bytes=3 * MB,
                      largest_tables=TABLES, filestore_files=7, attachments_missing=2,
                      files_orphaned=1, missing_sample=["ab/ab01", "cd/cd02"]))
    wait_for(lambda: size(client, raw, env.id)["largest_tables"], what="the report stored")
    body = size(client, raw, env.id)
    assert body["largest_tables"] == [{"name": "ir_attachment", "bytes": 9 * MB, "rows": 1200},
                                      {"name": "res_partner", "bytes": 2 * MB, "rows": -1}]
    assert (body["database_bytes"], body["filestore_files"], body["attachments_missing"],
            body["files_orphaned"], body["missing_sample"]) == (
        40 * MB, 7, 2, 1, ["ab/ab01", "cd/cd02"])
    # A report from an agent older than those fields keeps what was said of them.
    agent.send(report(env.id, database_bytes=41 * MB))
    wait_for(lambda: size(client, raw, env.id)["database_bytes"] == 41 * MB,
             what="the second report stored")
    assert size(client, raw, env.id)["attachments_missing"] == 2

    # The newest completed backups, with their stored sizes.
    for n, status in enumerate(("completed", "failed", "completed")):
        b = Backup.create(environment=env, status=status, backup_type="manual",
                          storage_prefix=f"backups/{env.id}/{n}/", total_size=100 + n,
                          compressed_size=50 + n)
        Backup.update(created_at=b.created_at + dt.timedelta(minutes=n)).where(
            Backup.id == b.id).execute()
    assert [(b["total_size"], b["compressed_size"]) for b in size(client, raw, env.id)[
        "backups"]] == [(102, 52), (100, 50)]


def test_the_size_of_an_environment_one_cannot_see_is_not_found(client, world, fleet):
    org, server, env, raw, agent = fleet
    other = world.environment(world.project(world.org(), world.server(world.org())))
    for env_id in (other.id, "00000000-0000-0000-0000-000000000000"):
        r = client.get(f"{P}/environments/{env_id}/size", headers=auth(raw))
        assert (r.status_code, r.json["error"]) == (404, "not_found")
    r = client.get(f"{P}/environments/not-a-uuid/size", headers=auth(raw))
    assert r.status_code == 404


def _measured(env, database, filestore, days_ago_database=None, days_ago_filestore=None):
    """The environment measured now, and the history point of a day ago (what the
    gateway's history writer leaves there)."""
    now = clock.now()
    monitoring.record_disk_usage(env.server_id, [{
        "environment_id": str(env.id), "database_bytes": database, "filestore_bytes": filestore,
        "measured_at_unix_ms": int(now.replace(tzinfo=dt.UTC).timestamp() * 1000)}])
    if days_ago_database is not None:
        at = int((now - dt.timedelta(days=1)).replace(tzinfo=dt.UTC).timestamp()) // 3600 * 3600
        EnvironmentMetric.insert(step=3600, at=at, n=60, environment_id=env.id,
                                 database_bytes=days_ago_database,
                                 filestore_bytes=days_ago_filestore).on_conflict_ignore().execute()


def alerts(org):
    return [e.data for e in Event.select().where(Event.organization == org.id,
                                                  Event.name == "environment.disk_growth")
            .order_by(Event.created_at)]


def test_growth_faster_than_the_limit_alerts_once_per_episode(client, world, fake_clock):
    org = world.org()
    env = world.environment(world.project(org, world.server(org)))
    berth = Plain({"GROWTH_ALERT_MB_PER_DAY": 100})
    _measured(env, 500 * MB, 10 * MB, 450 * MB, 10 * MB)  # 50 MB a day: under
    assert sizes.watch_growth(berth) == 0
    raw, _ = world.key(org, "read_only")
    growth = size(client, raw, env.id)["growth"]
    # 50 MB over a day and up to an hour (the history's point is its hour's start).
    assert 47 * MB < growth["database_bytes_per_day"] <= 50 * MB
    assert abs(growth["filestore_bytes_per_day"]) < MB

    fake_clock.advance(hours=1)
    _measured(env, 600 * MB, 10 * MB, 450 * MB, 10 * MB)  # ~150 MB a day
    assert sizes.watch_growth(berth) == 1
    assert sizes.watch_growth(berth) == 0  # the next turn, or another scheduler: nothing
    (alert,) = alerts(org)
    assert alert["figure"] == "database_bytes" and alert["environment_id"] == str(env.id)
    assert alert["limit_bytes_per_day"] == 100 * MB and alert["database_bytes"] == 600 * MB

    fake_clock.advance(hours=1)
    _measured(env, 540 * MB, 10 * MB, 450 * MB, 10 * MB)  # ~90 MB: not under 80 % yet
    assert sizes.watch_growth(berth) == 0
    assert Environment.get_by_id(env.id).growth_alerted_at is not None
    fake_clock.advance(hours=1)
    _measured(env, 500 * MB, 10 * MB, 450 * MB, 10 * MB)  # ~50 MB: the episode ends
    assert sizes.watch_growth(berth) == 0
    fake_clock.advance(hours=1)
    _measured(env, 500 * MB, 400 * MB, 450 * MB, 10 * MB)  # the filestore now
    assert sizes.watch_growth(berth) == 1
    assert [a["figure"] for a in alerts(org)] == ["database_bytes", "filestore_bytes"]
    # 0 turns the alert off.
    assert sizes.watch_growth(Plain({"GROWTH_ALERT_MB_PER_DAY": 0})) == 0


def test_no_history_a_day_old_means_no_growth_and_no_alert(client, world, fake_clock):
    org = world.org()
    env = world.environment(world.project(org, world.server(org)))
    _measured(env, 900 * MB, 900 * MB)
    assert sizes.watch_growth(Plain({"GROWTH_ALERT_MB_PER_DAY": 1})) == 0
    raw, _ = world.key(org, "read_only")
    assert size(client, raw, env.id)["growth"] is None
