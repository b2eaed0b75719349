"""Restores to a point in time, the control plane's side (real local storage and S3
on moto; the agent played over HTTP): the window an environment can be brought
back to, the restore's choice of base backup, WAL and filestore files, a moment
outside the window refused naming it, the filestore files archived beside the
WAL, and who may read the archive back."""

import datetime as dt
import hashlib
import uuid

from control_plane.agent_link import Plain
from control_plane.models import (
    AgentCommand,
    Backup,
    BackupPack,
    Deployment,
    Environment,
    FilestoreObject,
    FilestorePack,
    Server,
    WalFile,
)
from control_plane.services.backups import policy
from tests.control_plane.backups.conftest import RESULT, V1
from tests.control_plane.backups.test_retention import real_store  # noqa: F401  (a fixture)
from tests.control_plane.backups.test_wal import SYSTEM, archive, prod, send, store, url  # noqa: F401

T0 = dt.datetime(2026, 11, 20, 9, 0, 0)
BASE = {"object": "base.tar.zst", "size": 10, "sha256": "d" * 64, "start_lsn": "0/3000028",
        "end_lsn": "0/3000100", "system_identifier": SYSTEM, "timeline": 1,
        "compression": "zstd"}


def iso(moment):
    return moment.isoformat() + "Z"


def segment(number):
    return f"{SYSTEM}/00000001000000000000{number:04X}.zst"


def based_backup(client, bk, at, when, env=None):
    """A completed backup whose manifest holds a base starting in segment 3."""
    at(when)
    backup = bk.backup_via_api(client, env)
    bk.ack(backup.task_id)
    bk.finish(backup.task_id, result={**RESULT, "manifest": {**RESULT["manifest"],
                                                             "base": BASE}})
    return Backup.get_by_id(backup.id)


def ship(client, bk, store, number, finished):  # noqa: F811
    data = uuid.uuid4().bytes
    r = send(client, bk, store, segment(number), data, archived_at=iso(finished))
    assert r.status_code == 200, r.json


def restore(client, bk, env, moment, **body):
    return client.post(f"{V1}/environments/{env.id}/restore", headers=bk.h,
                       json={"target_time": moment, **body})


def test_the_window_runs_from_a_base_over_the_wal_that_follows_it(client, prod, store, at):  # noqa: F811
    bk = prod
    assert (archive(client, bk)["window_start"], archive(client, bk)["window_end"]) == \
        (None, None)
    based_backup(client, bk, at, T0)
    assert archive(client, bk)["window_start"] is None  # no WAL after the base yet
    for n in (3, 4, 5):
        ship(client, bk, store, n, T0 + dt.timedelta(minutes=n))
    shown = archive(client, bk)
    assert (shown["window_start"], shown["window_end"]) == \
        ("2026-11-20T09:00:00.000Z", "2026-11-20T09:05:00.000Z")
    ship(client, bk, store, 7, T0 + dt.timedelta(minutes=7))  # after a gap: out of reach
    assert archive(client, bk)["window_end"] == "2026-11-20T09:05:00.000Z"
    ship(client, bk, store, 6, T0 + dt.timedelta(minutes=6))  # the gap filled
    assert archive(client, bk)["window_end"] == "2026-11-20T09:07:00.000Z"


def test_a_restore_to_a_moment_reads_its_base_and_the_wal_up_to_it(client, prod, store, at):  # noqa: F811
    bk = prod
    base = based_backup(client, bk, at, T0)
    for n in (3, 4, 5, 6):
        ship(client, bk, store, n, T0 + dt.timedelta(minutes=n))
    content = b"an attachment written after the base"
    name = f"files/{hashlib.sha256(content).hexdigest()}.zst"
    path = "filestore/odoo/ab/ab" + "0" * 38
    assert send(client, bk, store, name, content, path=path).status_code == 200
    based_backup(client, bk, at, T0 + dt.timedelta(minutes=8))
    at(T0 + dt.timedelta(minutes=9))
    staging = bk.environment()
    r = restore(client, bk, staging, "2026-11-20T10:04:30+01:00",  # 09:04:30 UTC
                source_environment_id=str(bk.env.id))
    assert r.status_code == 202, r.json
    payload = AgentCommand.get(AgentCommand.deployment == r.json["id"]).payload
    pit = payload["point_in_time"]
    assert payload["backup_id"] == str(base.id) and pit["base_backup_id"] == str(base.id)
    assert pit["target_time"] == "2026-11-20T09:04:30Z"
    # From the base's segment to the first one finished after the moment.
    assert [n for n, _ in pit["wal"]] == [segment(3), segment(4), segment(5)]
    assert all(len(digest) == 64 for _, digest in pit["wal"])
    assert pit["wal_url"].endswith(f"/agent/v1/wal/{bk.env.id}")
    assert pit["files"] == [[path, name]]
    assert pit["maps"] == []  # the other backup keeps the filestore as one archive
    safety = Backup.get(Backup.task == r.json["id"])
    assert f"{bk.env.id} at 2026-11-20T09:04:30Z" in safety.notes


def test_moments_outside_the_window_are_refused_naming_it(client, world, prod, store, at):  # noqa: F811
    bk = prod
    based_backup(client, bk, at, T0)
    for n in (3, 4):
        ship(client, bk, store, n, T0 + dt.timedelta(minutes=n))
    at(T0 + dt.timedelta(minutes=10))
    before = (Deployment.select().count(), Backup.select().count())
    for moment in (iso(T0 - dt.timedelta(seconds=1)), iso(T0 + dt.timedelta(minutes=5))):
        r = restore(client, bk, bk.env, moment)
        assert r.status_code == 422 and r.json["error"] == "validation_error", r.json
        assert r.json["message"].endswith("is outside the environment's point-in-time "
                                          "window, from 2026-11-20T09:00:00Z to "
                                          "2026-11-20T09:04:00Z.")
        assert (r.json["window_start"], r.json["window_end"]) == \
            ("2026-11-20T09:00:00Z", "2026-11-20T09:04:00Z")
        assert "target_time" in r.json["details"]
    empty = bk.environment()
    r = restore(client, bk, empty, iso(T0))
    assert r.status_code == 422 and "window, empty" in r.json["message"], r.json
    foreign = bk.environment(project=world.project(bk.org, bk.server))
    r = restore(client, bk, foreign, iso(T0 + dt.timedelta(minutes=2)),
                source_environment_id=str(bk.env.id))
    assert r.status_code == 404, r.json
    for body in ({"target_time": iso(T0), "backup_id": str(uuid.uuid4())},
                 {"source_environment_id": str(bk.env.id)},
                 {"backup_id": str(uuid.uuid4()), "source_environment_id": str(bk.env.id)},
                 {"target_time": "yesterday"}):
        r = client.post(f"{V1}/environments/{bk.env.id}/restore", headers=bk.h, json=body)
        assert r.status_code == 422 and r.json["error"] == "validation_error", (body, r.json)
    assert (Deployment.select().count(), Backup.select().count()) == before


def test_filestore_files_are_archived_by_content_with_their_path(client, prod, store):  # noqa: F811
    bk = prod
    content = b"%PDF-1.7 an invoice"
    digest = hashlib.sha256(content).hexdigest()
    name, path = f"files/{digest}.zst", "filestore/odoo/12/12" + "3" * 38
    for bad in (None, "sessions/x", "filestore/../etc/passwd"):
        extra = {"path": bad} if bad else {}
        r = send(client, bk, store, name, content, **extra)
        assert r.status_code == 422, (bad, r.json)
    r = send(client, bk, store, segment(3), b"a segment", path=path)
    assert r.status_code == 422, r.json
    assert send(client, bk, store, name, content, path=path).status_code == 200
    row = WalFile.get(WalFile.name == name)
    assert (row.path, row.size) == (path, len(content))
    shown = archive(client, bk)
    assert (shown["files"], shown["newest_file"]) == (0, None)  # WAL files only
    # Content a kept backup of the environment holds is not sent again; content only
    # another environment's backup holds is (its restore reads this one's backups).
    mine, theirs = bk.completed_backup(client), bk.completed_backup(client, bk.environment())
    asked = [name]
    for backup in (mine, theirs):
        content = hashlib.sha256(str(backup.id).encode()).hexdigest()
        pack = FilestorePack.create(project=bk.project.id, key="objects/x", size=1,
                                    name=f"packs/{uuid.uuid4()}.tar.zst", sha256="e" * 64,
                                    objects=1)
        FilestoreObject.create(project=bk.project.id, sha256=content, size=1, pack=pack.id)
        BackupPack.create(backup=backup.id, pack=pack.id)
        asked.append(f"files/{content}.zst")
    r = client.post(url(bk, "known"), headers=bk.credential, json={"objects": asked})
    assert r.json == {"stored": sorted(asked[:2])}, r.json
    Backup.update(deleted_at=mine.created_at).where(Backup.id == mine.id).execute()
    r = client.post(url(bk, "known"), headers=bk.credential, json={"objects": asked})
    assert r.json == {"stored": [name]}, r.json


def test_a_server_restoring_from_an_environment_reads_its_archive(client, prod, store, at):  # noqa: F811
    bk = prod
    based_backup(client, bk, at, T0)
    ship(client, bk, store, 3, T0 + dt.timedelta(minutes=3))
    ship(client, bk, store, 4, T0 + dt.timedelta(minutes=4))
    other, credential = bk.new_server()
    elsewhere = bk.environment(server=other)

    def download(headers, name=None):
        return client.post(url(bk, "download"), headers=headers,
                           json={"object": name or segment(3)})

    r = download(bk.credential)
    assert r.status_code == 200 and r.json["url"], r.json
    assert download(bk.credential, segment(9)).status_code == 404
    assert download(credential).status_code == 404
    r = restore(client, bk, elsewhere, iso(T0 + dt.timedelta(minutes=2)),
                source_environment_id=str(bk.env.id))
    assert r.status_code == 202, r.json
    assert download(credential).status_code == 200  # while its restore runs
    bk.ack(r.json["id"], other)
    bk.finish(r.json["id"], ok=False, error="stopped", server=other)
    assert download(credential).status_code == 404


def test_drills_of_a_moment_on_demand_and_every_other_week(app, client, prod, store, at):  # noqa: F811
    bk = prod
    berth = Plain(app.extensions["berth"].settings)
    base = based_backup(client, bk, at, T0)
    for n in (3, 4):
        ship(client, bk, store, n, T0 + dt.timedelta(minutes=n))
    at(T0 + dt.timedelta(minutes=10))
    r = client.post(f"{V1}/environments/{bk.env.id}/drills", headers=bk.h,
                    json={"target_time": iso(T0 + dt.timedelta(minutes=5))})
    assert r.status_code == 422 and "point-in-time window" in r.json["message"], r.json
    r = client.post(f"{V1}/environments/{bk.env.id}/drills", headers=bk.h,
                    json={"target_time": iso(T0 + dt.timedelta(minutes=3))})
    assert r.status_code == 202, r.json
    assert (r.json["backup_id"], r.json["target_time"]) == \
        (str(base.id), "2026-11-20T09:03:00.000Z")
    pit = AgentCommand.get(AgentCommand.deployment == r.json["id"]).payload["point_in_time"]
    assert [n for n, _ in pit["wal"]] == [segment(3), segment(4)]  # 3 ended at 09:03
    bk.ack(r.json["id"])
    bk.finish(r.json["id"], result={"passed": True, "restore_seconds": 9.0})
    # Scheduled: the newest backup, then the window's newest moment, then the backup
    # (the policy's own backups off here, so that each turn drills).
    Environment.update(backup_enabled=False).where(Environment.id == bk.env.id).execute()
    kinds = []
    for week in range(3):
        at(T0 + dt.timedelta(days=7 * week, hours=1))
        policy.run(berth)
        drill = (Deployment.select().where(Deployment.kind == "drill",
                                           Deployment.trigger == "scheduled")
                 .order_by(Deployment.created_at.desc()).first())
        kinds.append(drill.extra_data.get("target_time"))
        bk.ack(drill.id)
        bk.finish(drill.id, result={"passed": True})
    assert kinds == [None, "2026-11-20T09:04:00", None]


def test_a_moment_before_utcs_calendar_is_refused(client, prod, store):  # noqa: F811
    bk = prod
    r = restore(client, bk, bk.env, "0001-01-01T00:00:00+05:00")
    assert r.status_code == 422 and r.json["error"] == "validation_error", r.json


def test_an_older_agent_is_not_asked_for_a_moment(client, prod, store, at):  # noqa: F811
    """It would restore the base and ignore the moment: 409 until it is upgraded."""
    bk = prod
    based_backup(client, bk, at, T0)
    for n in (3, 4):
        ship(client, bk, store, n, T0 + dt.timedelta(minutes=n))
    at(T0 + dt.timedelta(minutes=10))
    Server.update(agent_version="0.0.1").where(Server.id == bk.server.id).execute()
    moment = iso(T0 + dt.timedelta(minutes=2))
    for r in (restore(client, bk, bk.env, moment),
              client.post(f"{V1}/environments/{bk.env.id}/drills", headers=bk.h,
                          json={"target_time": moment})):
        assert r.status_code == 409 and r.json["error"] == "agent_upgrade_required", r.json
    assert not Deployment.select().where(Deployment.environment == bk.env.id,
                                         Deployment.kind != "backup").exists()


def test_wal_of_a_new_timeline_gets_a_base_backup_at_once(app, client, prod, store, at):  # noqa: F811
    """After a restore in place the cluster goes on on a new timeline: its moments are
    restorable from a base of it, which the scheduler asks for once (not again while
    it is the newest backup asked for), and the next restore's recovery learns which
    timelines the archive has used."""
    bk = prod
    berth = Plain(app.extensions["berth"].settings)
    Environment.update(backup_scheduled_for=dt.datetime(2100, 1, 1)).where(
        Environment.id == bk.env.id).execute()  # the day's own backup is not the question
    Environment.update(drill_enabled=False).where(Environment.id == bk.env.id).execute()
    based_backup(client, bk, at, T0)
    for n in (3, 4):
        ship(client, bk, store, n, T0 + dt.timedelta(minutes=n))
    at(T0 + dt.timedelta(minutes=5))
    assert policy.run(berth) == []  # the archive runs on the base's timeline
    history = f"{SYSTEM}/00000002.history.zst"
    assert send(client, bk, store, history, b"1\t0/4000000\tno recovery target\n",
                archived_at=iso(T0 + dt.timedelta(minutes=6))).status_code == 200
    send(client, bk, store, f"{SYSTEM}/000000020000000000000004.zst", uuid.uuid4().bytes,
         archived_at=iso(T0 + dt.timedelta(minutes=7)))
    at(T0 + dt.timedelta(minutes=8))
    [taken] = policy.run(berth)
    assert taken.environment_id == bk.env.id and "timeline" in taken.notes
    bk.ack(taken.task_id)
    bk.finish(taken.task_id, ok=False, error="the disk is full")
    at(T0 + dt.timedelta(minutes=9))
    assert policy.run(berth) == []  # asked once: the next day's backup is the retry

    r = restore(client, bk, bk.env, iso(T0 + dt.timedelta(minutes=3, seconds=30)))
    assert r.status_code == 202, r.json
    pit = AgentCommand.get(AgentCommand.deployment == r.json["id"]).payload["point_in_time"]
    assert pit["environment_id"] == str(bk.env.id)
    assert [n for n, _ in pit["history"]] == [history] and pit["newest_timeline"] == 2
    assert [n for n, _ in pit["wal"]] == [segment(3), segment(4)]  # the base's timeline only
