"""The agents' transfer API: the server's credential, its own backups only (and
the backup a restore on it reads), fixed object names, keys made by the control
plane, multipart uploads begun once per object."""

from control_plane.models import Backup
from tests.control_plane.backups.conftest import RESULT, V1, while_storage_waits

T = "/agent/v1/transfers"
SHA = "d" * 64


def test_upload_complete_and_read_back(client, store, bk):
    backup = bk.backup_via_api(client)
    url = f"{T}/{backup.id}"
    r = client.post(f"{url}/parts", headers=bk.credential,
                    json={"object": "database.dump", "part_number": 1})
    assert r.status_code == 200, r.json
    key = f"backups/{bk.env.id}/{backup.id}/database.dump"
    assert r.json["url"] == f"https://store.test/put/{key}?upload=up-0&part=1&ttl=3600"
    r = client.post(f"{url}/parts", headers=bk.credential,
                    json={"object": "database.dump", "part_number": 2})
    assert "upload=up-0&part=2" in r.json["url"] and store.begun == [(key, "up-0")]  # begun once
    r = client.post(f"{url}/download", headers=bk.credential, json={"object": "database.dump"})
    assert r.status_code == 404  # not uploaded yet
    sent = store.holds(key, b"PGDMP" + b"x" * 7)
    r = client.post(f"{url}/complete", headers=bk.credential, json={
        "object": "database.dump", **sent,
        "parts": [{"part_number": 2, "etag": "e2"}, {"part_number": 1, "etag": "e1"}]})
    assert r.status_code == 200 and r.json == sent  # as read back from storage
    assert store.completed[key] == ("up-0", [(1, "e1"), (2, "e2")])  # ascending
    row = Backup.get_by_id(backup.id)
    assert row.parts == {"database.dump": sent} and row.uploads == {}
    r = client.post(f"{url}/download", headers=bk.credential, json={"object": "database.dump"})
    assert r.status_code == 200 and r.json["url"].startswith(f"https://store.test/get/{key}")


def test_a_slow_join_in_storage_holds_up_no_other_upload(client, store, bk):
    """Storage may take minutes to join a large object's parts. Meanwhile the agent
    still gets part URLs for the backup's other object (it uploads both at once):
    no lock of the backup's row, nor SQLite's write lock, is held across the join."""
    backup = bk.backup_via_api(client)
    url = f"{T}/{backup.id}"
    client.post(f"{url}/parts", headers=bk.credential,
                json={"object": "database.dump", "part_number": 1})
    sent = store.holds(f"{backup.storage_prefix}database.dump", b"PGDMP" + b"x" * 7)
    done, r, before = while_storage_waits(
        store, "joining",
        lambda: client.post(f"{url}/complete", headers=bk.credential, json={
            "object": "database.dump", **sent, "parts": [{"part_number": 1, "etag": "e"}]}),
        lambda: client.post(f"{url}/parts", headers=bk.credential,
                            json={"object": "filestore.tar.zst", "part_number": 1}))
    assert r.status_code == 200 and before, r.json  # answered while the join was under way
    assert done.status_code == 200 and done.json == sent
    row = Backup.get_by_id(backup.id)
    assert row.parts == {"database.dump": sent}
    assert list(row.uploads) == ["filestore.tar.zst"]


def _part(client, bk, backup, name, number):
    """The agent's request for a part URL, to be made later."""
    return lambda: client.post(f"{T}/{backup.id}/parts", headers=bk.credential,
                               json={"object": name, "part_number": number})


def test_storage_slow_to_begin_an_upload_holds_up_no_other(client, store, bk):
    """The first part's request begins the object's upload in storage, which may be
    slow to answer: meanwhile the backup's other object gets its part URLs."""
    backup = bk.backup_via_api(client)
    slow, other, before = while_storage_waits(
        store, "beginning", _part(client, bk, backup, "database.dump", 1),
        _part(client, bk, backup, "filestore.tar.zst", 1))
    assert other.status_code == 200 and before, other.json
    assert slow.status_code == 200, slow.json
    assert set(Backup.get_by_id(backup.id).uploads) == {"database.dump", "filestore.tar.zst"}


def test_two_parts_beginning_one_object_at_once_share_one_upload(client, store, bk):
    """Two parts of one object asked for at once both begin an upload in storage: the
    first recorded is used by both, the other is aborted."""
    backup = bk.backup_via_api(client)
    key = f"{backup.storage_prefix}database.dump"
    first, second, before = while_storage_waits(
        store, "beginning", _part(client, bk, backup, "database.dump", 1),
        _part(client, bk, backup, "database.dump", 2))
    assert before and first.status_code == second.status_code == 200
    assert "upload=up-0&part=1" in first.json["url"] and "upload=up-0&part=2" in second.json["url"]
    assert store.begun == [(key, "up-0"), (key, "up-1")] and store.aborted == [(key, "up-1")]
    assert Backup.get_by_id(backup.id).uploads == {"database.dump": "up-0"}


def test_bad_requests(client, store, bk):
    backup = bk.backup_via_api(client)
    url = f"{T}/{backup.id}"
    for body in ({"object": "../../etc/passwd", "part_number": 1},
                 {"object": "database.dump", "part_number": 0},
                 {"object": "database.dump", "part_number": 10001},
                 {"object": "database.dump"}, ["database.dump"]):
        r = client.post(f"{url}/parts", headers=bk.credential, json=body)
        assert r.status_code == 422, body
    r = client.post(f"{url}/complete", headers=bk.credential, json={
        "object": "manifest.json", "size": 1, "sha256": SHA,
        "parts": [{"part_number": 1, "etag": "e"}]})
    assert r.status_code == 409  # no upload begun
    client.post(f"{url}/parts", headers=bk.credential,
                json={"object": "manifest.json", "part_number": 1})
    stored = store.holds(f"{backup.storage_prefix}manifest.json", b"{}\n\n\n")
    r = client.post(f"{url}/complete", headers=bk.credential, json={
        "object": "manifest.json", "size": 6, "sha256": stored["sha256"],
        "parts": [{"part_number": 1, "etag": "e"}]})
    assert r.status_code == 422 and Backup.get_by_id(backup.id).parts == {}
    assert store.begun == [(f"{backup.storage_prefix}manifest.json", "up-0")]


def test_an_object_stored_unlike_what_was_sent_is_not_recorded(client, store, bk):
    """The control plane reads the whole object back: a byte changed on the way
    (same size) is refused with both checksums, and the object is not recorded."""
    backup = bk.backup_via_api(client)
    url = f"{T}/{backup.id}"
    client.post(f"{url}/parts", headers=bk.credential,
                json={"object": "filestore.tar.zst", "part_number": 1})
    sent = store.holds(f"{backup.storage_prefix}filestore.tar.zst", b"abcdef")
    store.objects[f"{backup.storage_prefix}filestore.tar.zst"] = b"abcdeF"
    r = client.post(f"{url}/complete", headers=bk.credential, json={
        "object": "filestore.tar.zst", **sent, "parts": [{"part_number": 1, "etag": "e"}]})
    assert r.status_code == 422 and r.json["error"] == "validation_error"
    assert sent["sha256"] in r.json["message"] and "does not match" in r.json["message"]
    assert Backup.get_by_id(backup.id).parts == {}


def test_only_the_servers_agent(client, store, bk):
    backup = bk.backup_via_api(client)
    url = f"{T}/{backup.id}/parts"
    body = {"object": "database.dump", "part_number": 1}
    for headers in ({}, {"Authorization": "Bearer agt_live_" + "0" * 40}, bk.h, bk.key,
                    {"Authorization": bk.credential["Authorization"].replace("Bearer", "Basic")}):
        r = client.post(url, headers=headers, json=body)
        assert r.status_code == 401 and r.json["error"] == "invalid_agent_credential"
    _other, other_credential = bk.new_server()
    r = client.post(url, headers=other_credential, json=body)
    assert r.status_code == 404
    r = client.post(f"{T}/{'0' * 32}/parts", headers=bk.credential, json=body)
    assert r.status_code == 404
    assert store.begun == []


def test_a_finished_backup_takes_no_more_uploads(client, store, bk):
    backup = bk.completed_backup(client)
    r = client.post(f"{T}/{backup.id}/parts", headers=bk.credential,
                    json={"object": "database.dump", "part_number": 1})
    assert r.status_code == 409 and r.json["error"] == "transfer_closed"
    r = client.post(f"{T}/{backup.id}/download", headers=bk.credential,
                    json={"object": "database.dump"})
    assert r.status_code == 200  # what the agent's result recorded


def test_a_restore_on_another_server_reads_its_source(client, store, bk):
    source = bk.completed_backup(client)
    other_server, other_credential = bk.new_server()
    staging = bk.environment(server=other_server)
    url = f"{T}/{source.id}/download"
    assert client.post(url, headers=other_credential,
                       json={"object": "database.dump"}).status_code == 404
    r = client.post(f"{V1}/environments/{staging.id}/restore", headers=bk.h,
                    json={"backup_id": str(source.id)})
    assert r.status_code == 202
    r = client.post(url, headers=other_credential, json={"object": "filestore.tar.zst"})
    assert r.status_code == 200, r.json
    assert source.storage_prefix + "filestore.tar.zst" in r.json["url"]
    r = client.post(f"{T}/{source.id}/parts", headers=other_credential,
                    json={"object": "database.dump", "part_number": 1})
    assert r.status_code == 404  # reads it, never writes it
    bk.finish(Backup.get(Backup.source_backup == source.id).task_id,
              result={"safety": RESULT}, server=other_server)
    assert client.post(url, headers=other_credential,
                       json={"object": "database.dump"}).status_code == 404  # restore over


def test_an_interrupted_restore_reads_its_safety_backup_back(client, store, bk):
    """An agent stopped mid-restore rolls back from the safety backup when it
    returns: the safety backup's uploaded objects stay readable though its row
    (and the restore) are failed."""
    source = bk.completed_backup(client)
    task = client.post(f"{V1}/environments/{bk.env.id}/restore", headers=bk.h,
                       json={"backup_id": str(source.id)}).json["id"]
    safety = Backup.get(Backup.task == task)
    bk.ack(task)
    url = f"{T}/{safety.id}"
    client.post(f"{url}/parts", headers=bk.credential,
                json={"object": "database.dump", "part_number": 1})
    sent = store.holds(safety.storage_prefix + "database.dump", b"PGD")
    r = client.post(f"{url}/complete", headers=bk.credential, json={
        "object": "database.dump", **sent, "parts": [{"part_number": 1, "etag": "e"}]})
    assert r.status_code == 200
    bk.finish(task, ok=False, error="interrupted: the agent stopped")
    assert Backup.get_by_id(safety.id).status == "failed"
    r = client.post(f"{url}/download", headers=bk.credential, json={"object": "database.dump"})
    assert r.status_code == 200 and safety.storage_prefix + "database.dump" in r.json["url"]


def test_uploads_left_open_by_a_failed_backup_are_aborted(client, store, bk):
    from control_plane.services.backups import transfers

    backup = bk.backup_via_api(client)
    bk.ack(backup.task_id)
    client.post(f"{T}/{backup.id}/parts", headers=bk.credential,
                json={"object": "filestore.tar.zst", "part_number": 1})
    running = bk.backup_via_api(client, env=bk.environment())  # still uploading: left alone
    client.post(f"{T}/{running.id}/parts", headers=bk.credential,
                json={"object": "database.dump", "part_number": 1})
    bk.finish(backup.task_id, ok=False, error="the storage went away")
    row = Backup.get_by_id(backup.id)
    assert row.status == "failed" and row.uploads == {"filestore.tar.zst": "up-0"}

    store.unreachable = True  # often why the backup failed: kept for the next run
    assert transfers.abort_unfinished(client.application.extensions["berth"]) == 0
    assert Backup.get_by_id(backup.id).uploads == {"filestore.tar.zst": "up-0"}
    store.unreachable = False
    assert transfers.abort_unfinished(client.application.extensions["berth"]) == 1
    assert store.aborted == [(f"{backup.storage_prefix}filestore.tar.zst", "up-0")]
    assert Backup.get_by_id(backup.id).uploads == {}
    assert Backup.get_by_id(running.id).uploads == {"database.dump": "up-1"}
