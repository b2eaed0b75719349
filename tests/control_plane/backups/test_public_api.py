"""The public API's backups: the page (filters, newest first, scope, read-only
keys) and the download URLs (completed only, expires_in, streaming flag)."""

import datetime as dt

from control_plane.models import Backup
from tests.conftest import auth
from tests.control_plane.backups.conftest import P


def make(bk, env=None, status="completed", backup_type="manual", minutes=0, **kw):
    backup = Backup.create(environment=env or bk.env, status=status, backup_type=backup_type,
                           storage_prefix=f"backups/{(env or bk.env).id}/x/", **kw)
    Backup.update(created_at=backup.created_at + dt.timedelta(minutes=minutes)).where(
        Backup.id == backup.id).execute()
    return Backup.get_by_id(backup.id)


def test_the_page_newest_first_with_filters(client, bk):
    made = [make(bk, status=s, backup_type=t, minutes=i) for i, (s, t) in enumerate([
        ("completed", "manual"), ("failed", "scheduled"), ("completed", "pre_deploy"),
        ("pending", "manual"), ("completed", "manual")])]
    make(bk, minutes=10, deleted_at=made[0].created_at)  # retention removed it: not listed
    make(bk, env=bk.environment(), minutes=11)  # another environment's
    url = f"{P}/environments/{bk.env.id}/backups"
    r = client.get(url, headers=bk.ro_key)  # read-only keys welcome
    assert r.status_code == 200
    assert [b["id"] for b in r.json["items"]] == [str(b.id) for b in reversed(made)]
    assert {k: r.json[k] for k in ("total", "page", "page_size", "total_pages")} == {
        "total": 5, "page": 1, "page_size": 20, "total_pages": 1}
    assert set(r.json["items"][0]) == {
        "id", "environment_id", "status", "backup_type", "database_size", "filestore_size",
        "total_size", "compressed_size", "started_at", "completed_at", "duration_seconds",
        "expires_at", "is_verified", "verified_at", "notes", "error_message", "created_at"}
    r = client.get(url, query_string={"page_size": 2, "page": 2}, headers=bk.key)
    assert [b["id"] for b in r.json["items"]] == [str(made[2].id), str(made[1].id)]
    assert (r.json["total"], r.json["total_pages"]) == (5, 3)
    r = client.get(url, query_string={"status": "completed", "backup_type": "manual"},
                   headers=bk.key)
    assert [b["id"] for b in r.json["items"]] == [str(made[4].id), str(made[0].id)]
    for bad in ({"status": "expired"}, {"backup_type": "daily"}, {"page_size": 101},
                {"page": 0}):
        assert client.get(url, query_string=bad, headers=bk.key).status_code == 422, bad


def test_scope(client, world, bk):
    other_project = world.project(bk.org)
    scoped = auth(world.key(bk.org, scope="project", project=other_project)[0])
    backup = make(bk)
    assert client.get(f"{P}/environments/{bk.env.id}/backups", headers=scoped).status_code == 404
    assert client.get(f"{P}/backups/{backup.id}/download", headers=scoped).status_code == 404
    stranger = auth(world.key(world.org())[0])
    assert client.get(f"{P}/backups/{backup.id}/download", headers=stranger).status_code == 404
    r = client.get(f"{P}/backups/{'0' * 32}/download", headers=bk.key)
    assert r.status_code == 404
    assert client.get(f"{P}/environments/{bk.env.id}/backups").status_code == 401


def test_download_urls(client, store, bk):
    backup = make(bk, parts={"database.dump": {}, "filestore.tar.gz": {}, "manifest.json": {}})
    r = client.get(f"{P}/backups/{backup.id}/download", headers=bk.ro_key)
    assert r.status_code == 200, r.json
    body = r.json
    prefix = backup.storage_prefix
    assert body["backup_id"] == str(backup.id) and body["expires_in"] == 3600
    assert body["database_url"].startswith(f"https://store.test/get/{prefix}database.dump?ttl=3600")
    assert f"{prefix}filestore.tar.gz" in body["filestore_url"]  # the object uploaded
    assert f"{prefix}manifest.json" in body["manifest_url"]
    assert body["use_streaming"] is True and body["expires_at"].endswith("Z")
    store.streaming = False
    r = client.get(f"{P}/backups/{backup.id}/download", query_string={"expires_in": 300},
                   headers=bk.key)
    assert r.json["use_streaming"] is False and "ttl=300" in r.json["database_url"]
    for bad in (299, 86401, "soon"):
        r = client.get(f"{P}/backups/{backup.id}/download", query_string={"expires_in": bad},
                       headers=bk.key)
        assert r.status_code == 422, bad


def test_only_a_completed_backup_is_downloaded(client, store, bk):
    for status in ("pending", "running", "failed", "cancelled"):
        backup = make(bk, status=status)
        r = client.get(f"{P}/backups/{backup.id}/download", headers=bk.key)
        assert r.status_code == 400 and r.json["error"] == "backup_not_completed", status
    assert store.begun == []


def test_the_endpoints_are_documented(client):
    spec = client.get(f"{P}/openapi.json").json
    assert {f"{P}/environments/{{env_id}}/backups", f"{P}/backups/{{backup_id}}/download"} <= set(
        spec["paths"])
    assert {"Backup", "BackupPage", "Download"} <= set(spec["components"]["schemas"])
    ops = client.get("/api/v1/openapi.json").json
    assert {"/api/v1/environments/{env_id}/backups", "/api/v1/environments/{env_id}/restore"} <= (
        set(ops["paths"]))


def test_a_backup_and_its_download_links_are_audit_events(client, store, bk):
    backup = bk.completed_backup(client)  # asked for by the user, on /api/v1
    pending = make(bk, status="running")
    assert client.get(f"{P}/backups/{pending.id}/download",
                      headers=bk.ro_key).status_code == 400  # refused: no event
    assert client.get(f"{P}/backups/{backup.id}/download", headers=bk.ro_key).status_code == 200
    events = client.get(f"{P}/audit-events", headers=bk.ro_key).json["data"]
    assert [(e["action"], e["actor"]["type"]) for e in events] == [
        ("backup.download", "api_key"), ("environment.backup", "user")]
    assert events[0]["target_id"] == str(backup.id)
    assert events[1]["target_id"] == str(bk.env.id)
    assert events[1]["changes"]["task_id"] == str(backup.task_id)
