"""Filestore objects, once per project, through the agents' transfer API and real
storage (the local directory and S3 on moto): a pack is read back and every
object in it hashed against its name before the project counts on it; an agent
learns which objects its project holds; a backup completes only with the packs
its map names stored, and retention keeps exactly the packs kept backups need.
The filestore download is composed from the packs."""

import hashlib
import io
import tarfile
import uuid
from urllib.parse import urlparse

import pytest
import requests
import zstandard

from control_plane.agent_link import Plain
from control_plane.infra import clock
from control_plane.models import Backup, BackupPack, Deployment, FilestorePack, Server
from control_plane.services.backups import objects, retention, stores
from protocol import filestore_objects as fo
from tests.control_plane.backups.conftest import RESULT, V1, P
from tests.control_plane.backups.test_retention import real_store  # noqa: F401  (a fixture)

T = "/agent/v1/transfers"


def sha(data):
    return hashlib.sha256(data).hexdigest()


def pack(contents, names=None):
    """(name, bytes) of a zstd pack holding `contents`, members named by their hashes
    (or by `names`, to lie)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i, data in enumerate(contents):
            info = tarfile.TarInfo((names or {}).get(i, sha(data)))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return fo.pack_name(uuid.uuid4(), "zstd"), zstandard.ZstdCompressor().compress(raw.getvalue())


@pytest.fixture
def store(real_store, monkeypatch):  # noqa: F811
    settings, real = real_store
    monkeypatch.setattr(stores, "for_settings", lambda _settings: real)
    return real


def send(client, bk, backup, store, name, data):
    """An object uploaded as the agent uploads it: one part, then completed."""
    r = client.post(f"{T}/{backup.id}/parts", headers=bk.credential,
                    json={"object": name, "part_number": 1})
    assert r.status_code == 200, r.json
    if store.streaming:
        answer = client.put(urlparse(r.json["url"]).path, data=data)
    else:
        answer = requests.put(r.json["url"], data=data, timeout=30)
    assert answer.status_code == 200
    return client.post(f"{T}/{backup.id}/complete", headers=bk.credential, json={
        "object": name, "size": len(data), "sha256": sha(data),
        "parts": [{"part_number": 1, "etag": answer.headers["ETag"].strip('"')}]})


def known(client, bk, backup, *contents):
    r = client.post(f"{T}/{backup.id}/objects", headers=bk.credential,
                    json={"sha256": [sha(c) for c in contents]})
    assert r.status_code == 200, r.json
    return r.json["known"]


def finish(bk, backup, files, packs):
    """The agent's result for an objects-layout backup whose map lists `files`
    ({path: content}, each in the pack of `packs` ({content: pack name}))."""
    entries = [[path, sha(data), len(data), packs[data], 0o644, 0, 0]
               for path, data in files.items()]
    fs = {"layout": "objects", "object": fo.MAP_OBJECT, "packs": fo.packs(entries)}
    bk.ack(backup.task_id)
    bk.finish(backup.task_id, result={**RESULT, "manifest": {
        "format": "berth-backup/1", "filestore": fs}})
    return Backup.get_by_id(backup.id)


def finish_after_map(client, bk, backup, store, files, packs):
    """The map uploaded first, as the agent does."""
    entries = [[path, sha(data), len(data), packs[data], 0o644, 0, 0]
               for path, data in files.items()]
    r = send(client, bk, backup, store, fo.MAP_OBJECT, fo.encode_map(entries))
    assert r.status_code == 200, r.json
    return finish(bk, backup, files, packs)


def test_a_pack_is_checked_then_its_objects_are_the_projects(client, bk, store):
    first = bk.backup_via_api(client)
    assert known(client, bk, first, b"one", b"two") == {}
    name, data = pack([b"one", b"two"])
    r = send(client, bk, first, store, name, data)
    assert r.status_code == 200 and r.json == {"size": len(data), "sha256": sha(data)}, r.json
    assert known(client, bk, first, b"one", b"two", b"three") == {sha(b"one"): name,
                                                                   sha(b"two"): name}
    # Another environment of the project finds them too; another project does not.
    other_env = bk.environment()
    bk.ack(first.task_id)
    bk.finish(first.task_id)
    second = bk.backup_via_api(client, other_env)
    assert known(client, bk, second, b"one") == {sha(b"one"): name}
    row = FilestorePack.get(FilestorePack.name == name)
    assert (row.objects, row.size, row.key) == (2, len(data), f"objects/{bk.project.id}/{name}")
    # Never written twice: other backups count on it.
    r = client.post(f"{T}/{second.id}/parts", headers=bk.credential,
                    json={"object": name, "part_number": 1})
    assert r.status_code == 409 and r.json["error"] == "conflict", r.json
    # And its agent reads it back.
    r = client.post(f"{T}/{second.id}/download", headers=bk.credential, json={"object": name})
    assert r.status_code == 200, r.json


def test_a_pack_that_is_not_what_its_names_say_is_refused(client, bk, store):
    backup = bk.backup_via_api(client)
    name, data = pack([b"evil"], names={0: sha(b"good")})
    r = send(client, bk, backup, store, name, data)
    assert r.status_code == 422 and "not a pack of filestore objects" in r.json["message"]
    assert known(client, bk, backup, b"good", b"evil") == {}
    assert not FilestorePack.select().exists()
    r = send(client, bk, backup, store, fo.pack_name(uuid.uuid4(), "zstd"), b"not zstd")
    assert r.status_code == 422, r.json


@pytest.mark.parametrize("body", [{}, {"sha256": "a" * 64}, {"sha256": ["A" * 64]},
                                  {"sha256": ["a" * 63]}, {"sha256": ["a" * 64] * 10_001}])
def test_bad_questions_are_refused(client, bk, store, body):
    backup = bk.backup_via_api(client)
    r = client.post(f"{T}/{backup.id}/objects", headers=bk.credential, json=body)
    assert r.status_code == 422 and r.json["error"] == "validation_error", r.json
    r = client.post(f"{T}/{backup.id}/parts", headers=bk.credential,
                    json={"object": "packs/../x.tar.zst", "part_number": 1})
    assert r.status_code == 422, r.json


def test_a_finished_backup_asks_nothing_more(client, bk, store):
    backup = bk.completed_backup(client)
    r = client.post(f"{T}/{backup.id}/objects", headers=bk.credential, json={"sha256": []})
    assert r.status_code == 409 and r.json["error"] == "transfer_closed", r.json
    stranger = bk.new_server()[1]
    r = client.post(f"{T}/{backup.id}/objects", headers=stranger, json={"sha256": []})
    assert r.status_code == 404, r.json


def test_retention_keeps_what_kept_backups_need(client, bk, store):
    kept = bk.backup_via_api(client)
    shared, data = pack([b"shared"])
    assert send(client, bk, kept, store, shared, data).status_code == 200
    kept = finish_after_map(client, bk, kept, store, {"filestore/odoo/aa/one": b"shared"},
                            {b"shared": shared})
    assert kept.status == "completed", kept.error_message
    assert [link.pack.name for link in BackupPack.select()] == [shared]

    # A backup whose map names a pack never stored fails, and its own pack goes.
    failed = bk.backup_via_api(client)
    orphan, orphan_data = pack([b"orphan"])
    assert send(client, bk, failed, store, orphan, orphan_data).status_code == 200
    failed = finish(bk, failed, {"x": b"orphan", "y": b"lost"},
                    {b"orphan": orphan, b"lost": fo.pack_name(uuid.uuid4(), "zstd")})
    assert failed.status == "failed" and "not stored" in failed.error_message
    assert objects.collect(store) == 1
    assert FilestorePack.get(FilestorePack.name == orphan).deleted_at is not None
    assert store.size(objects.pack_key(bk.project.id, orphan)) is None
    assert store.size(objects.pack_key(bk.project.id, shared)) == len(data)

    # Once the backup that needs it is gone, so is the pack.
    Backup.update(expires_at=clock.now()).where(Backup.id == kept.id).execute()
    retention.sweep(Plain(dict(client.application.config)))
    assert Backup.get_by_id(kept.id).deleted_at is not None
    assert FilestorePack.get(FilestorePack.name == shared).deleted_at is not None
    assert store.size(objects.pack_key(bk.project.id, shared)) is None


def test_no_pack_goes_while_a_backup_of_the_project_is_in_progress(client, bk, store):
    running = bk.backup_via_api(client)
    name, data = pack([b"soon named"])
    assert send(client, bk, running, store, name, data).status_code == 200
    assert objects.collect(store) == 0
    assert store.size(objects.pack_key(bk.project.id, name)) == len(data)


def test_the_filestore_download_is_composed_from_the_packs(client, bk, store):
    backup = bk.backup_via_api(client)
    first, data1 = pack([b"alpha", b"beta"])
    second, data2 = pack([b"gamma"])
    for name, data in ((first, data1), (second, data2)):
        assert send(client, bk, backup, store, name, data).status_code == 200
    files = {"filestore/odoo/01/alpha": b"alpha", "filestore/odoo/02/beta": b"beta",
             "sessions/x": b"gamma", "filestore/odoo/03/alpha-again": b"alpha"}
    backup = finish_after_map(client, bk, backup, store, files,
                              {b"alpha": first, b"beta": first, b"gamma": second})
    assert backup.status == "completed", backup.error_message
    r = client.get(f"{P}/backups/{backup.id}/download", headers=bk.key)
    assert r.status_code == 200, r.json
    url = urlparse(r.json["filestore_url"])
    answer = client.get(url.path)
    assert answer.status_code == 200
    assert f"backup-{backup.id}-filestore.tar" in answer.headers["Content-Disposition"]
    with tarfile.open(fileobj=io.BytesIO(answer.data)) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    assert got == files
    r = client.get(url.path[:-3] + "xyz")
    assert r.status_code == 403, r.json


def test_an_older_agent_is_not_asked_to_read_objects(client, bk, store):
    """An agent older than the layout takes archive backups still (it does not know
    `filestore_layout`), but cannot restore or export an objects backup: 409, and
    nothing starts. An archive backup restores as ever."""
    backup = bk.backup_via_api(client)
    name, data = pack([b"x"])
    assert send(client, bk, backup, store, name, data).status_code == 200
    backup = finish_after_map(client, bk, backup, store, {"a": b"x"}, {b"x": name})
    archived = bk.completed_backup(client)  # RESULT: a filestore.tar.zst archive
    Server.update(agent_version="0.1.0").where(Server.id == bk.server.id).execute()
    before = Deployment.select().count()
    for r in (client.post(f"{V1}/environments/{bk.env.id}/restore", headers=bk.h,
                          json={"backup_id": str(backup.id)}),
              client.post(f"{V1}/backups/{backup.id}/export", headers=bk.h)):
        assert r.status_code == 409 and r.json["error"] == "agent_upgrade_required", r.json
    assert Deployment.select().count() == before
    r = client.post(f"{V1}/environments/{bk.env.id}/restore", headers=bk.h,
                    json={"backup_id": str(archived.id)})
    assert r.status_code == 202, r.json


def test_a_map_gone_bad_in_storage_is_a_storage_error_not_a_crash(client, bk, store):
    """The composed download reads the backup's map first: one that storage no longer
    holds as written is 502 storage_unavailable in the API's error shape."""
    backup = bk.backup_via_api(client)
    name, data = pack([b"alpha"])
    assert send(client, bk, backup, store, name, data).status_code == 200
    backup = finish_after_map(client, bk, backup, store, {"a": b"alpha"}, {b"alpha": name})
    url = urlparse(client.get(f"{P}/backups/{backup.id}/download", headers=bk.key)
                   .json["filestore_url"])
    store.delete_prefix(backup.storage_prefix + fo.MAP_OBJECT)
    r = client.get(url.path)
    assert r.status_code == 502 and r.json["error"] == "storage_unavailable", r.data[:300]
