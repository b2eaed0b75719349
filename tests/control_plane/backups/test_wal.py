"""WAL archiving through the agents' WAL transfer API and real storage (the local
directory and S3 on moto): a file is read back and checked before it counts,
stored once, reported and alerted on, and removed only behind the oldest backup
the environment keeps. The deploy's command tells the agent where to ship."""

import datetime as dt
import hashlib
import uuid
from urllib.parse import urlparse

import pytest
import requests

from control_plane.agent_link import Plain
from control_plane.infra import clock
from control_plane.models import Backup, Environment, Event, Server, WalFile
from control_plane.services.backups import stores, wal
from tests.control_plane.backups.conftest import V1, P
from tests.control_plane.backups.test_retention import real_store  # noqa: F401  (a fixture)

SYSTEM = "7301234567890123456"
SEGMENT = f"{SYSTEM}/000000010000000000000003.zst"


def sha(data):
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(real_store, monkeypatch):  # noqa: F811
    settings, real = real_store
    monkeypatch.setattr(stores, "for_settings", lambda _settings: real)
    return real


@pytest.fixture
def prod(bk):
    """The Bk environment as production: its backups, so its archiving, are on."""
    Environment.update(environment_type="production").where(
        Environment.id == bk.env.id).execute()
    return bk


def url(bk, action, env=None):
    return f"/agent/v1/wal/{(env or bk.env).id}/{action}"


def send(client, bk, store, name, data, sent=None, **fields):
    """A WAL file uploaded as the agent uploads it (`sent`: what it says it sent;
    `fields`: more of the completion's, a file's `archived_at` or `path`)."""
    r = client.post(url(bk, "parts"), headers=bk.credential,
                    json={"object": name, "part_number": 1})
    if r.status_code != 200:
        return r
    if store.streaming:
        answer = client.put(urlparse(r.json["url"]).path, data=data)
    else:
        answer = requests.put(r.json["url"], data=data, timeout=30)
    assert answer.status_code == 200
    sent = data if sent is None else sent
    return client.post(url(bk, "complete"), headers=bk.credential, json={
        "object": name, "size": len(sent), "sha256": sha(sent), **fields,
        "parts": [{"part_number": 1, "etag": answer.headers["ETag"].strip('"')}]})


def archive(client, bk):
    r = client.get(f"{V1}/environments/{bk.env.id}/wal-archive", headers=bk.h)
    assert r.status_code == 200, r.json
    return r.json


def report(client, bk, **body):
    r = client.post(url(bk, "status"), headers=bk.credential,
                    json={"pending": 0, "shipped": 0, "archiver": None, **body})
    assert r.status_code == 200, r.json


def test_a_wal_file_is_checked_then_stored_once(client, prod, store):
    bk = prod
    data = b"\x28\xb5\x2f\xfd" + uuid.uuid4().bytes * 1000
    r = client.post(url(bk, "known"), headers=bk.credential, json={"objects": [SEGMENT]})
    assert r.status_code == 200 and r.json == {"stored": []}, r.json
    r = send(client, bk, store, SEGMENT, data)
    assert r.status_code == 200 and r.json == {"size": len(data), "sha256": sha(data)}, r.json
    assert store.size(f"wal/{bk.env.id}/{SEGMENT}") == len(data)
    r = client.post(url(bk, "known"), headers=bk.credential,
                    json={"objects": [SEGMENT, f"{SYSTEM}/000000010000000000000004.zst"]})
    assert r.json == {"stored": [SEGMENT]}
    # Never written twice: a file PostgreSQL copied again is dropped by the agent.
    r = client.post(url(bk, "parts"), headers=bk.credential,
                    json={"object": SEGMENT, "part_number": 1})
    assert r.status_code == 409 and r.json["error"] == "conflict", r.json
    shown = archive(client, bk)
    assert (shown["enabled"], shown["status"], shown["files"], shown["bytes"]) == \
        (True, "starting", 1, len(data))
    assert shown["newest_file"] == "000000010000000000000003"


def test_a_file_that_is_not_what_was_sent_is_refused(client, prod, store):
    bk = prod
    r = send(client, bk, store, SEGMENT, b"what storage holds", sent=b"what the agent read")
    assert r.status_code == 422 and "does not match" in r.json["message"], r.json
    assert not WalFile.select().where(WalFile.stored_at.is_null(False)).exists()
    r = client.post(url(bk, "known"), headers=bk.credential, json={"objects": [SEGMENT]})
    assert r.json == {"stored": []}
    # Sent again, right this time, it is stored.
    assert send(client, bk, store, SEGMENT, b"right").status_code == 200
    assert archive(client, bk)["files"] == 1


@pytest.mark.parametrize("name", [
    "000000010000000000000003.zst", f"{SYSTEM}/000000010000000000000003",
    f"{SYSTEM}/00000001000000000000000G.zst", f"{SYSTEM}/../x.zst", f"x{SYSTEM}/00000002.history.zst",
    f"{'9' * 21}/000000010000000000000003.zst", f"{SYSTEM}/000000010000000000000003.zst/x",
    "\u00b2/000000010000000000000003.zst"])
def test_bad_names_are_refused(client, prod, store, name):
    bk = prod
    for action, body in (("known", {"objects": [name]}),
                         ("parts", {"object": name, "part_number": 1})):
        r = client.post(url(bk, action), headers=bk.credential, json=body)
        assert r.status_code == 422 and r.json["error"] == "validation_error", (action, r.json)
    assert not WalFile.select().exists()


def test_good_names_of_every_kind_are_taken(client, prod, store):
    bk = prod
    names = [f"{SYSTEM}/00000002.history.gz", SEGMENT.replace(".zst", ".gz"),
             f"{SYSTEM}/000000010000000000000003.00000028.backup.zst"]
    r = client.post(url(bk, "known"), headers=bk.credential, json={"objects": names})
    assert r.status_code == 200, r.json


def test_only_the_environments_server_ships_its_wal(client, prod, store):
    bk = prod
    stranger = bk.new_server()[1]
    for action, body in (("known", {"objects": []}),
                         ("parts", {"object": SEGMENT, "part_number": 1}),
                         ("status", {"pending": 0})):
        r = client.post(url(bk, action), headers=stranger, json=body)
        assert r.status_code == 404, r.json
        r = client.post(url(bk, action), json=body)
        assert r.status_code == 401, r.json
    assert not WalFile.select().exists()
    assert Environment.get_by_id(bk.env.id).wal_report is None


def test_failing_archiving_alerts_once_and_its_recovery_once(client, prod, store, at):
    bk = prod
    now = dt.datetime(2026, 12, 1, 12, 0, 0)
    at(now)
    report(client, bk)
    assert archive(client, bk)["status"] == "archiving"
    assert wal.watch() == 0
    report(client, bk, pending=1, error="000000010000000000000003: HTTP 503")
    shown = archive(client, bk)
    assert shown["status"] == "failing" and "HTTP 503" in shown["error_message"]
    assert wal.watch() == 1 and wal.watch() == 0
    failed = Event.get(Event.name == "backup.archiving_failed")
    assert failed.data["environment_id"] == str(bk.env.id)
    assert "HTTP 503" in failed.data["error_message"]
    assert archive(client, bk)["alerted_at"] is not None

    report(client, bk)  # shipped again
    assert wal.watch() == 1 and wal.watch() == 0
    assert Event.select().where(Event.name == "backup.archiving_recovered").count() == 1
    assert archive(client, bk)["alerted_at"] is None

    # PostgreSQL's archive_command failing since its last success.
    report(client, bk, archiver={"failed_count": 3, "last_failed_wal": "000000010000000000000009",
                                 "last_failed_at": "2026-12-01T11:59:50Z",
                                 "last_archived_at": "2026-12-01T11:50:00Z"})
    assert "archive_command failed on 000000010000000000000009" in archive(client, bk)[
        "error_message"]
    report(client, bk, archiver={"failed_count": 3, "last_failed_wal": "000000010000000000000009",
                                 "last_failed_at": "2026-12-01T11:59:50Z",
                                 "last_archived_at": "2026-12-01T11:59:55Z"})
    assert archive(client, bk)["status"] == "archiving"

    # A file waiting too long, then an agent gone silent.
    report(client, bk, pending=2, oldest_pending_at="2026-12-01T11:54:00Z")
    shown = archive(client, bk)
    assert shown["status"] == "failing" and shown["lag_seconds"] == 360
    report(client, bk, pending=0)
    assert archive(client, bk)["lag_seconds"] == 0
    at(now + dt.timedelta(seconds=wal.ALERT_AFTER + 1))
    assert "has not reported" in archive(client, bk)["error_message"]
    assert wal.watch() == 1
    assert Event.select().where(Event.name == "backup.archiving_failed").count() == 2


def test_archiving_follows_the_backups_and_the_deploy_carries_it(client, bk, store):
    """Off with the backups (not production): the deploy's command turns it off;
    on: it names where to ship."""
    assert archive(client, bk)["status"] == "off"
    assert wal.agent_fields(bk.env, client.application.config) == {"wal_archiving": None}
    Environment.update(backup_enabled=True).where(Environment.id == bk.env.id).execute()
    fields = wal.agent_fields(Environment.get_by_id(bk.env.id), client.application.config)
    assert fields["wal_archiving"]["transfer_url"].endswith(f"/agent/v1/wal/{bk.env.id}")
    assert fields["wal_archiving"]["archive_timeout"] == 30
    # A server reached over SSH runs no shipper: nothing to archive into.
    Server.update(connection="ssh").where(Server.id == bk.server.id).execute()
    env = Environment.get_by_id(bk.env.id)
    assert wal.agent_fields(env, client.application.config) == {"wal_archiving": None}
    assert archive(client, bk)["status"] == "off"
    Server.update(connection="agent").where(Server.id == bk.server.id).execute()
    r = client.get(f"{V1}/environments/{uuid.uuid4()}/wal-archive", headers=bk.h)
    assert r.status_code == 404 and r.json["error"] == "not_found"
    # Read-only keys read it on the public surface too; another organization's is a 404.
    r = client.get(f"{P}/environments/{bk.env.id}/wal-archive", headers=bk.ro_key)
    assert r.status_code == 200 and r.json["status"] == "starting", r.json
    other = bk.world.key(bk.world.org(), key_type="read_only")[0]
    r = client.get(f"{P}/environments/{bk.env.id}/wal-archive",
                   headers={"Authorization": f"Bearer {other}"})
    assert r.status_code == 404 and r.json["error"] == "not_found", r.json


def test_retention_keeps_the_window_from_the_backup_it_starts_from(client, prod, store, at):
    """The window is `keep_daily` days (7): WAL goes only behind the newest kept
    backup taken before the window began (else the oldest kept one)."""
    bk = prod
    settings = Plain(dict(client.application.config))
    start = dt.datetime(2026, 11, 1, 0, 0, 0)
    stored_on = {}

    def ship(day):
        at(start + dt.timedelta(days=day, hours=1))
        name = f"{SYSTEM}/0000000100000000000000{day:02X}.zst"
        assert send(client, bk, store, name, name.encode()).status_code == 200
        stored_on[day] = name

    def backup(day):
        at(start + dt.timedelta(days=day))
        return bk.completed_backup(client)

    ship(0)
    ship(1)
    assert wal.sweep(settings) == 0  # no backup kept: all of it stays
    first = backup(2)
    for day in range(2, 6):
        ship(day)
    backup(5)
    assert wal.sweep(settings) == 2  # behind the oldest backup: days 0 and 1
    assert sorted(f.name for f in WalFile.select()) == [stored_on[d] for d in range(2, 6)]
    assert store.size(wal.key_of(bk.env.id, stored_on[0])) is None
    assert store.size(wal.key_of(bk.env.id, stored_on[2])) == len(stored_on[2])

    # Day 11.5: the window starts at day 4.5, so day 2's backup is still its base.
    for day in range(6, 11):
        ship(day)
    at(start + dt.timedelta(days=11, hours=12))
    assert wal.base_of(Environment.get_by_id(bk.env.id)).id == first.id
    assert wal.sweep(settings) == 0
    # Day 12.5: the window starts at day 5.5, after day 5's backup: days 2 to 4 go.
    at(start + dt.timedelta(days=12, hours=12))
    assert wal.base_of(Environment.get_by_id(bk.env.id)).id != first.id
    assert wal.sweep(settings) == 3
    assert sorted(f.name for f in WalFile.select()) == [stored_on[d] for d in range(5, 11)]
    # A shorter window moves the base only to a backup there is: day 5's still.
    Environment.update(backup_keep_daily=1).where(Environment.id == bk.env.id).execute()
    assert wal.sweep(settings) == 0
    # No backup kept at all: nothing goes (a base may yet come).
    Backup.update(deleted_at=clock.now()).where(Backup.environment == bk.env.id).execute()
    assert wal.sweep(settings) == 0


def test_a_gone_environments_wal_goes_with_its_last_backup(client, prod, store, at):
    bk = prod
    settings = Plain(dict(client.application.config))
    at(dt.datetime(2026, 12, 1, 0, 0, 0))
    assert send(client, bk, store, SEGMENT, b"segment").status_code == 200
    at(dt.datetime(2026, 12, 1, 0, 30, 0))
    kept = bk.completed_backup(client)  # still kept: its base needs nothing before it
    Environment.update(is_active=False).where(Environment.id == bk.env.id).execute()
    assert wal.sweep(settings) == 1
    assert store.size(wal.key_of(bk.env.id, SEGMENT)) is None
    at(dt.datetime(2026, 12, 1, 1, 0, 0))
    later = f"{SYSTEM}/000000010000000000000004.zst"
    assert send(client, bk, store, later, b"later").status_code == 200
    assert wal.sweep(settings) == 0  # after the kept backup: its base's
    Backup.update(deleted_at=clock.now()).where(Backup.id == kept.id).execute()
    assert wal.sweep(settings) == 1 and not WalFile.select().exists()


def test_a_gap_in_the_archive_alerts_until_a_backup_after_it(client, prod, store, at):
    """The shipper never skips a file: a segment missing between two stored ones is
    WAL lost on the server, and no moment after it can be recovered from an older
    base. History and backup label files are not segments."""
    bk = prod
    now = dt.datetime(2026, 12, 1, 12, 0, 0)
    at(now)
    report(client, bk)

    def segment(number, timeline=1):
        return f"{SYSTEM}/{timeline:08X}{number // 256:08X}{number % 256:08X}.zst"
    for name in (segment(0xFE), segment(0xFF), segment(0x100),
                 f"{SYSTEM}/000000010000000100000000.00000028.backup.zst",
                 segment(0x101), f"{SYSTEM}/00000002.history.zst", segment(0x101, timeline=2)):
        assert send(client, bk, store, name, name.encode()).status_code == 200
    assert archive(client, bk)["status"] == "archiving"  # across a log boundary: no gap
    assert send(client, bk, store, segment(0x104), b"after a gap").status_code == 200
    shown = archive(client, bk)
    assert shown["status"] == "failing", shown
    assert ("WAL files 000000010000000100000002..000000010000000100000003 are missing"
            in shown["error_message"])
    assert wal.watch() == 1
    at(now + dt.timedelta(minutes=1))
    bk.completed_backup(client)  # a new base: the archive is whole from it on
    assert archive(client, bk)["status"] == "archiving"
    assert wal.watch() == 1
