"""Odoo's backup zip on /api/v1: an export task and its download URL; an import
uploaded in parts, then restored as a task the agent refuses or carries out.
The agent is played through the gateway's services and the transfer API."""

from control_plane.models import AgentCommand, Backup, BackupImport, Deployment, Event
from tests.control_plane.backups.conftest import RESULT, V1, while_storage_waits

T = "/agent/v1/transfers"
SHA = "e" * 64
ZIP = "odoo-export.zip"


def _export(client, bk, backup):
    return client.post(f"{V1}/backups/{backup.id}/export", headers=bk.h)


def _upload_export(client, bk, store, backup):
    url = f"{T}/{backup.id}"
    r = client.post(f"{url}/parts", headers=bk.credential, json={"object": ZIP, "part_number": 1})
    assert r.status_code == 200, r.json
    sent = store.holds(f"{backup.storage_prefix}{ZIP}", b"PK\x05\x06" + bytes(18))
    r = client.post(f"{url}/complete", headers=bk.credential, json={
        "object": ZIP, **sent, "parts": [{"part_number": 1, "etag": "x"}]})
    assert r.status_code == 200, r.json
    return sent


def test_an_export_is_a_task_then_a_download(app, client, store, bk):
    backup = bk.completed_backup(client)
    r = client.get(f"{V1}/backups/{backup.id}/export", headers=bk.h)
    assert r.status_code == 404 and r.json["error"] == "export_not_found"
    events = Event.select().count()

    r = _export(client, bk, backup)
    assert r.status_code == 202, r.json
    assert (r.json["kind"], r.json["status"]) == ("export", "pending")
    task = Deployment.get_by_id(r.json["id"])
    command = AgentCommand.get(AgentCommand.deployment == task.id)
    assert command.kind == "export" and command.payload == {
        "environment_id": str(bk.env.id), "backup_id": str(backup.id),
        "transfer_url": app.config["PUBLIC_URL"].rstrip("/") + f"{T}/{backup.id}",
        "object": ZIP, "erp_version": "17.0"}
    r = client.get(f"{V1}/backups/{backup.id}/export", headers=bk.h)
    assert r.status_code == 409 and r.json["error"] == "export_in_progress"
    assert _export(client, bk, backup).json["error"] == "task_in_progress"

    bk.ack(task.id)
    sent = _upload_export(client, bk, store, backup)
    bk.finish(task.id, result={"object": ZIP, **sent, "files": 3})
    assert Deployment.get_by_id(task.id).status == "success"
    row = Backup.get_by_id(backup.id)
    assert row.status == "completed" and row.parts[ZIP] == sent
    assert Event.select().count() == events  # neither a deployment nor a backup event

    r = client.get(f"{V1}/backups/{backup.id}/export?expires_in=600", headers=bk.h)
    assert r.status_code == 200, r.json
    assert r.json["url"].startswith(f"https://store.test/get/{backup.storage_prefix}{ZIP}?ttl=600")
    assert r.json["filename"].endswith(".zip") and r.json["filename"] in r.json["url"]
    assert r.json["use_streaming"] is True and r.json["size"] == sent["size"] and r.json["expires_at"]
    # the export is done: the agent writes nothing more into the backup
    r = client.post(f"{T}/{backup.id}/parts", headers=bk.credential,
                    json={"object": ZIP, "part_number": 1})
    assert r.status_code == 409 and r.json["error"] == "transfer_closed"


def test_storage_slow_to_drop_a_failed_exports_upload_holds_up_no_other_work(client, store, bk):
    """A new export drops in storage what a failed one left begun; storage slow to
    answer that holds up no other writer (on SQLite, every writer)."""
    backup = bk.completed_backup(client)
    task = Deployment.get_by_id(_export(client, bk, backup).json["id"])
    bk.ack(task.id)
    r = client.post(f"{T}/{backup.id}/parts", headers=bk.credential,
                    json={"object": ZIP, "part_number": 1})
    assert r.status_code == 200, r.json
    bk.finish(task.id, ok=False, error="the agent stopped")
    stale, other = Backup.get_by_id(backup.id).uploads[ZIP], bk.environment()
    again, _, before = while_storage_waits(
        store, "aborting", lambda: _export(client, bk, backup),
        lambda: bk.backup_via_api(client, other))
    assert before  # the other backup was taken while the abort was still under way
    assert again.status_code == 202, again.json
    assert store.aborted == [(f"{backup.storage_prefix}{ZIP}", stale)]
    assert ZIP not in (Backup.get_by_id(backup.id).uploads or {})


def test_exports_refused(client, store, world, bk):
    pending = bk.backup_via_api(client)
    r = _export(client, bk, pending)
    assert r.status_code == 400 and r.json["error"] == "backup_not_completed"
    bk.finish(pending.task_id, ok=False, error="disk full")
    done = bk.completed_backup(client)
    # an agent writes an export only while its task runs
    r = client.post(f"{T}/{done.id}/parts", headers=bk.credential,
                    json={"object": ZIP, "part_number": 1})
    assert r.status_code == 409 and r.json["error"] == "transfer_closed"
    outsider = world.user(world.org(), permissions=("project.environments.deploy",))
    from control_plane.services.accounts import orgs

    other = {"Authorization": f"Bearer {orgs.issue_user_token(outsider.id)}"}
    assert client.post(f"{V1}/backups/{done.id}/export", headers=other).status_code == 404
    assert client.get(f"{V1}/backups/{done.id}/export", headers=other).status_code == 404
    viewer = world.user(bk.org, permissions=())
    viewer_h = {"Authorization": f"Bearer {orgs.issue_user_token(viewer.id)}"}
    assert client.post(f"{V1}/backups/{done.id}/export", headers=viewer_h).status_code == 403
    stopped = bk.environment(status="stopped")
    backup = Backup.create(environment=stopped, status="completed",
                           storage_prefix=f"backups/{stopped.id}/x/")
    r = client.post(f"{V1}/backups/{backup.id}/export", headers=bk.h)
    assert r.status_code == 409 and r.json["error"] == "environment_not_ready"
    r = client.get(f"{V1}/backups/{done.id}/export?expires_in=5", headers=bk.h)
    assert r.status_code == 422


def _imports(bk, env=None):
    return f"{V1}/environments/{(env or bk.env).id}/imports"


def test_a_slow_join_of_an_import_holds_up_no_other_work(client, store, bk):
    """Storage may take minutes to join a large zip's parts. Meanwhile the environment
    takes other work (here a backup): neither its row nor SQLite's write lock is held
    across the join."""
    r = client.post(_imports(bk), headers=bk.h, json={"filename": "prod.zip"})
    base = f"{_imports(bk)}/{r.json['import_id']}"
    client.post(f"{base}/parts", headers=bk.h, json={"part_number": 1})
    store.sizes[f"imports/{bk.env.id}/{r.json['import_id']}/upload"] = 4096
    done, _, before = while_storage_waits(
        store, "joining",
        lambda: client.post(f"{base}/complete", headers=bk.h,
                            json={"parts": [{"part_number": 1, "etag": "a"}]}),
        lambda: bk.backup_via_api(client))
    assert before  # the backup was taken while the join was still under way
    assert done.status_code == 200, done.json
    assert (done.json["status"], done.json["size"]) == ("uploaded", 4096)


def test_storage_slow_to_begin_an_import_holds_up_no_other_work(client, store, bk):
    """An import's upload is begun in storage before anything is written: on SQLite
    the other writers go on meanwhile."""
    made, _, before = while_storage_waits(
        store, "beginning",
        lambda: client.post(_imports(bk), headers=bk.h, json={"filename": "prod.zip"}),
        lambda: bk.backup_via_api(client))
    assert before and made.status_code == 201, made.json
    assert BackupImport.get_by_id(made.json["import_id"]).upload_id == "up-0"


def test_an_import_is_uploaded_in_parts_then_restored(app, client, store, bk):
    r = client.post(_imports(bk), headers=bk.h, json={"filename": "prod.zip"})
    assert r.status_code == 201, r.json
    import_id = r.json["import_id"]
    key = f"imports/{bk.env.id}/{import_id}/upload"
    assert r.json["status"] == "uploading" and r.json["filename"] == "prod.zip"
    assert r.json["upload"]["max_part_size"] == 64 * 1024 * 1024
    assert store.begun == [(key, "up-0")]
    base = f"{_imports(bk)}/{import_id}"
    r = client.post(f"{base}/restore", headers=bk.h)
    assert r.status_code == 409 and r.json["error"] == "import_not_uploaded"
    for n in (1, 2):
        r = client.post(f"{base}/parts", headers=bk.h, json={"part_number": n})
        assert r.status_code == 200 and r.json["url"].endswith(f"upload=up-0&part={n}&ttl=3600")
    # the agent cannot write an import, nor read one before it is uploaded
    assert client.post(f"{T}/{import_id}/parts", headers=bk.credential,
                       json={"object": "upload", "part_number": 1}).status_code == 422
    assert client.post(f"{T}/{import_id}/download", headers=bk.credential,
                       json={"object": "upload"}).status_code == 404
    store.sizes[key] = 70 * 1024 * 1024
    r = client.post(f"{base}/complete", headers=bk.h, json={
        "parts": [{"part_number": 2, "etag": "b"}, {"part_number": 1, "etag": "a"}]})
    assert r.status_code == 200, r.json
    assert (r.json["status"], r.json["size"]) == ("uploaded", 70 * 1024 * 1024)
    assert store.completed[key] == ("up-0", [(1, "a"), (2, "b")])
    r = client.post(f"{base}/parts", headers=bk.h, json={"part_number": 3})
    assert r.status_code == 409 and r.json["error"] == "import_uploaded"

    r = client.post(f"{base}/restore", headers=bk.h)
    assert r.status_code == 202, r.json
    task = Deployment.get_by_id(r.json["id"])
    safety = Backup.get(Backup.task == task.id)
    assert task.kind == "restore" and str(import_id) in safety.notes
    command = AgentCommand.get(AgentCommand.deployment == task.id)
    transfers = app.config["PUBLIC_URL"].rstrip("/") + f"{T}/"
    assert command.payload["import"] == {"import_id": import_id, "object": "upload",
                                         "transfer_url": transfers + import_id}
    assert command.payload["safety"]["backup_id"] == str(safety.id)
    assert command.payload["erp_version"] == "17.0" and "backup_id" not in command.payload
    assert client.get(base, headers=bk.h).json["status"] == "restoring"
    r = client.post(f"{T}/{import_id}/download", headers=bk.credential, json={"object": "upload"})
    assert r.status_code == 200 and r.json["url"].startswith(f"https://store.test/get/{key}")

    bk.ack(task.id)
    bk.finish(task.id, result={"safety": RESULT, "restored_from": import_id})
    r = client.get(base, headers=bk.h)
    assert r.json["status"] == "restored" and r.json["task_id"] == str(task.id)
    assert Backup.get_by_id(safety.id).status == "completed"


def test_a_refused_import_fails_its_task_and_says_why(client, store, bk):
    imp = client.post(_imports(bk), headers=bk.h, json={}).json
    base = f"{_imports(bk)}/{imp['import_id']}"
    store.sizes[f"imports/{bk.env.id}/{imp['import_id']}/upload"] = 10
    client.post(f"{base}/complete", headers=bk.h, json={"parts": [{"part_number": 1, "etag": "a"}]})
    task = client.post(f"{base}/restore", headers=bk.h).json["id"]
    bk.ack(task)
    bk.finish(task, ok=False, error="import_zip_bomb: member 'filestore/x' expands more than 200:1")
    d = Deployment.get_by_id(task)
    assert d.status == "failed" and d.error_message.startswith("import_zip_bomb")
    assert client.get(base, headers=bk.h).json["status"] == "failed"
    assert Backup.get(Backup.task == task).status == "failed"  # no safety backup was taken


def test_imports_refused(client, store, world, bk):
    r = client.post(_imports(bk), headers=bk.h, json={"filename": "x" * 300})
    assert r.status_code == 422
    imp = client.post(_imports(bk), headers=bk.h, json={}).json
    base = f"{_imports(bk)}/{imp['import_id']}"
    for body in ({"part_number": 0}, {"part_number": 10001}, {"part_number": "1"}, {}):
        assert client.post(f"{base}/parts", headers=bk.h, json=body).status_code == 422
    r = client.post(f"{base}/complete", headers=bk.h, json={"parts": [{"part_number": 1,
                                                                       "etag": "a"}]})
    assert r.status_code == 422  # nothing was stored: an empty upload
    other_env = bk.environment()
    assert client.get(f"{_imports(bk, other_env)}/{imp['import_id']}",
                      headers=bk.h).status_code == 404
    stopped = bk.environment(status="stopped")
    s = client.post(_imports(bk, stopped), headers=bk.h, json={}).json
    store.sizes[f"imports/{stopped.id}/{s['import_id']}/upload"] = 10
    client.post(f"{_imports(bk, stopped)}/{s['import_id']}/complete", headers=bk.h,
                json={"parts": [{"part_number": 1, "etag": "a"}]})
    r = client.post(f"{_imports(bk, stopped)}/{s['import_id']}/restore", headers=bk.h)
    assert r.status_code == 409 and r.json["error"] == "environment_not_ready"
    assert BackupImport.select().count() == 2
    # another server's agent does not read the import
    _, credential = bk.new_server()
    store.sizes[f"imports/{bk.env.id}/{imp['import_id']}/upload"] = 10
    client.post(f"{base}/complete", headers=bk.h, json={"parts": [{"part_number": 1, "etag": "a"}]})
    r = client.post(f"{T}/{imp['import_id']}/download", headers=credential,
                    json={"object": "upload"})
    assert r.status_code == 404


def test_an_import_through_the_real_local_storage(client, bk):
    """No fake: parts PUT to the signed URLs, joined, then read by the agent's
    download URL with the suffix range its RangeFile starts with."""
    import re
    from urllib.parse import urlsplit

    def path_of(url):
        parts = urlsplit(url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    data = b"PK\x03\x04" + bytes(range(256)) * 4000
    imp = client.post(_imports(bk), headers=bk.h, json={"filename": "x.zip"}).json
    base = f"{_imports(bk)}/{imp['import_id']}"
    parts = []
    for n, piece in enumerate((data[:600_000], data[600_000:]), start=1):
        url = client.post(f"{base}/parts", headers=bk.h, json={"part_number": n}).json["url"]
        put = client.put(path_of(url), data=piece)
        assert put.status_code == 200, put.data
        assert re.fullmatch(r"[0-9a-f]{32}", put.headers["ETag"].strip('"'))
        parts.append({"part_number": n, "etag": put.headers["ETag"].strip('"')})
        assert client.put(path_of(url), data=piece).status_code == 403  # single use
    r = client.post(f"{base}/complete", headers=bk.h, json={"parts": parts})
    assert r.status_code == 200 and r.json["size"] == len(data)
    client.post(f"{base}/restore", headers=bk.h)
    r = client.post(f"{T}/{imp['import_id']}/download", headers=bk.credential,
                    json={"object": "upload"})
    tail = client.get(path_of(r.json["url"]), headers={"Range": "bytes=-1000"})
    assert tail.status_code == 206 and tail.data == data[-1000:]
    assert tail.headers["Content-Range"] == f"bytes {len(data) - 1000}-{len(data) - 1}/{len(data)}"
