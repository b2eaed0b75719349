"""Retention: the scheduler's sweep deletes expired backups' objects (and
their open multipart uploads) from real storage, the local directory and S3
(moto), and marks the rows; the backups of a removed environment are kept 30
days at most."""

import datetime as dt
import uuid
from urllib.parse import urlparse

import boto3
import pytest
import requests

from control_plane import storage
from control_plane.agent_link import Plain
from control_plane.models import Backup, BackupImport, Environment
from control_plane.services.backups import retention
from tests.control_plane.backups.conftest import V1

DAY = dt.datetime(2026, 11, 2, 12, 0)
NAMES = ("database.dump", "filestore.tar.zst", "manifest.json")
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(params=["local", "s3"])
def real_store(request, app, monkeypatch):
    """(settings, store): the app's own local directory, or a bucket of moto's server."""
    settings = dict(app.extensions["berth"].settings)
    if request.param == "s3":
        moto = request.getfixturevalue("moto_s3")
        for name, value in AWS.items():
            monkeypatch.setenv(name, value)
        bucket = f"berth-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=moto.url).create_bucket(Bucket=bucket)
        settings.update(STORAGE_URL=f"s3://{bucket}/root", S3_ENDPOINT_URL=moto.url)
    return settings, storage.from_settings(settings)


def put(client, store, key, data):
    """An object stored as the agent stores it: a part PUT to its URL, completed."""
    upload_id = store.begin_upload(key)
    part = store.part_url(key, upload_id, 1)
    if store.streaming:  # the control plane's own URL: through the app
        answer = client.put(urlparse(part).path, data=data)
        etag = answer.headers["ETag"]
    else:
        answer = requests.put(part, data=data, timeout=30)
        etag = answer.headers["ETag"]
    assert answer.status_code == 200
    store.complete_upload(key, upload_id, [(1, etag)])


def open_uploads(store, key, upload_id):
    if store.streaming:
        return (store.root / "uploads" / upload_id).exists()
    answer = store.client.list_multipart_uploads(Bucket=store.bucket)
    return any(u["UploadId"] == upload_id for u in answer.get("Uploads", []))


def stored_backup(client, bk, store):
    backup = bk.completed_backup(client)
    for name in NAMES:
        put(client, store, backup.storage_prefix + name, f"{name} of {backup.id}".encode())
    return Backup.get_by_id(backup.id)


def test_an_expired_backup_leaves_storage_and_the_lists(client, bk, at, real_store):
    settings, store = real_store
    at(DAY)
    old = stored_backup(client, bk, store)
    upload_id = store.begin_upload(old.storage_prefix + "filestore.tar.zst")
    Backup.update(uploads={"filestore.tar.zst": upload_id}).where(Backup.id == old.id).execute()
    at(DAY + dt.timedelta(days=20))
    kept = stored_backup(client, bk, store)
    assert old.expires_at == DAY + dt.timedelta(days=30)

    assert retention.sweep(Plain(settings), now=DAY + dt.timedelta(days=29)) == []
    assert retention.sweep(Plain(settings), now=DAY + dt.timedelta(days=30)) == [old.id]
    for name in NAMES:
        assert store.size(old.storage_prefix + name) is None
        assert store.size(kept.storage_prefix + name) is not None
    assert not open_uploads(store, old.storage_prefix + "filestore.tar.zst", upload_id)
    row = Backup.get_by_id(old.id)
    assert row.deleted_at == DAY + dt.timedelta(days=30) and row.uploads == {}
    listed = client.get(f"{V1}/environments/{bk.env.id}/backups", headers=bk.h).json
    assert [item["id"] for item in listed["items"]] == [str(kept.id)]
    r = client.get(f"/api/public/v1/backups/{old.id}/download", headers=bk.key)
    assert r.status_code == 404
    assert client.get(f"/api/public/v1/backups/{kept.id}/download",
                      headers=bk.key).status_code == 200
    assert retention.sweep(Plain(settings), now=DAY + dt.timedelta(days=31)) == []  # once


def test_failed_backups_go_too_and_running_ones_wait(client, bk, at, real_store):
    settings, store = real_store
    at(DAY)
    failed = bk.backup_via_api(client)
    put(client, store, failed.storage_prefix + "database.dump", b"half a dump")
    bk.ack(failed.task_id)
    bk.finish(failed.task_id, ok=False, error="storage went away")
    assert Backup.get_by_id(failed.id).status == "failed"
    running = bk.backup_via_api(client)
    bk.ack(running.task_id)
    Backup.update(expires_at=DAY).where(Backup.id == running.id).execute()
    assert retention.sweep(Plain(settings), now=DAY + dt.timedelta(days=31)) == [failed.id]
    assert store.size(failed.storage_prefix + "database.dump") is None
    assert Backup.get_by_id(running.id).deleted_at is None


def test_a_removed_environment_s_backups_are_kept_30_days_at_most(app, client, bk, at):
    settings = app.extensions["berth"].settings
    at(DAY)
    manual = bk.completed_backup(client)
    long_kept = bk.completed_backup(client)
    Backup.update(backup_type="scheduled").where(Backup.id == long_kept.id).execute()
    retention.refresh_expiry(Environment.get_by_id(bk.env.id))
    assert Backup.get_by_id(long_kept.id).expires_at == dt.datetime(2027, 2, 2, 12, 0)
    removed = DAY + dt.timedelta(days=10)
    Environment.update(is_active=False, status="deleted", updated_at=removed).where(
        Environment.id == bk.env.id).execute()
    at(removed)
    assert retention.sweep(Plain(settings)) == []
    assert Backup.get_by_id(manual.id).expires_at == DAY + dt.timedelta(days=30)  # its own
    assert Backup.get_by_id(long_kept.id).expires_at == removed + dt.timedelta(days=30)
    assert retention.sweep(Plain(settings), now=DAY + dt.timedelta(days=30)) == [manual.id]
    assert retention.sweep(Plain(settings), now=removed + dt.timedelta(days=30)) == [long_kept.id]


def test_imports_are_kept_a_week_then_leave_storage_and_the_api(client, bk, at, real_store):
    settings, store = real_store
    at(DAY)

    def new_import(uploaded):
        import_id = uuid.uuid4()
        key = f"imports/{bk.env.id}/{import_id}/upload"
        if uploaded:
            put(client, store, key, b"an uploaded zip")
        upload_id = None if uploaded else store.begin_upload(key)
        return BackupImport.create(id=import_id, environment=bk.env.id, storage_key=key,
                                   upload_id=upload_id,
                                   status="uploaded" if uploaded else "uploading")

    done, unfinished, read = new_import(True), new_import(False), new_import(True)
    restoring = bk.backup_via_api(client)  # a task in progress stands for its restore
    BackupImport.update(task=restoring.task_id).where(BackupImport.id == read.id).execute()
    at(DAY + dt.timedelta(days=3))
    young = new_import(True)

    assert retention.sweep_imports(Plain(settings), now=DAY + dt.timedelta(days=6)) == []
    removed = retention.sweep_imports(Plain(settings), now=DAY + dt.timedelta(days=7))
    assert sorted(removed) == sorted([done.id, unfinished.id])
    assert store.size(done.storage_key) is None
    assert not open_uploads(store, unfinished.storage_key, unfinished.upload_id)
    assert store.size(read.storage_key) and store.size(young.storage_key)
    for gone in (done, unfinished):
        r = client.get(f"{V1}/environments/{bk.env.id}/imports/{gone.id}", headers=bk.h)
        assert r.status_code == 404, r.json
    r = client.get(f"{V1}/environments/{bk.env.id}/imports/{young.id}", headers=bk.h)
    assert r.status_code == 200 and r.json["status"] == "uploaded"
    bk.ack(restoring.task_id)
    bk.finish(restoring.task_id)
    assert retention.sweep_imports(Plain(settings), now=DAY + dt.timedelta(days=8)) == [read.id]


def test_a_failed_backup_s_uploads_are_all_aborted_even_one_never_recorded(client, bk,
                                                                            real_store):
    """A storage cut can lose the answer to a begun upload: the upload exists in
    storage, its id is on no row. Every unfinished upload under the prefix goes."""
    from control_plane.services.backups import transfers

    settings, store = real_store
    failed = bk.backup_via_api(client)
    recorded = store.begin_upload(failed.storage_prefix + "filestore.tar.zst")
    lost = store.begin_upload(failed.storage_prefix + "database.dump")
    Backup.update(uploads={"filestore.tar.zst": recorded}).where(
        Backup.id == failed.id).execute()
    other = bk.backup_via_api(client, env=bk.environment())  # still running: left alone
    running = store.begin_upload(other.storage_prefix + "database.dump")
    bk.ack(failed.task_id)
    bk.finish(failed.task_id, ok=False, error="storage went away")

    assert transfers.abort_unfinished(Plain(settings)) == 2
    assert not open_uploads(store, failed.storage_prefix + "filestore.tar.zst", recorded)
    assert not open_uploads(store, failed.storage_prefix + "database.dump", lost)
    assert open_uploads(store, other.storage_prefix + "database.dump", running)
    assert Backup.get_by_id(failed.id).uploads == {}
