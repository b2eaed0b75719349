"""The whole path through the real local storage (no fake): the agent's part
PUT to a signed URL, the completed object read back through its download URL,
and the public download URL working without an auth header, with Range."""

import hashlib
from urllib.parse import urlsplit

from control_plane.models import Backup
from tests.control_plane.backups.conftest import RESULT, P

T = "/agent/v1/transfers"


def path_of(url):
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def test_upload_verify_and_download_through_local_storage(client, bk):
    backup = bk.backup_via_api(client)
    data = b"PGDMP" + bytes(range(256)) * 100
    r = client.post(f"{T}/{backup.id}/parts", headers=bk.credential,
                    json={"object": "database.dump", "part_number": 1})
    assert r.status_code == 200, r.json
    put = client.put(path_of(r.json["url"]), data=data)
    assert put.status_code == 200, put.data
    etag = put.headers["ETag"].strip('"')
    r = client.post(f"{T}/{backup.id}/complete", headers=bk.credential, json={
        "object": "database.dump", "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "parts": [{"part_number": 1, "etag": etag}]})
    assert r.status_code == 200 and r.json == {"size": len(data),  # read back from the file
                                               "sha256": hashlib.sha256(data).hexdigest()}
    r = client.post(f"{T}/{backup.id}/download", headers=bk.credential,
                    json={"object": "database.dump"})
    assert client.get(path_of(r.json["url"])).data == data  # what a restore reads

    bk.ack(backup.task_id)
    bk.finish(backup.task_id, result={**RESULT, "parts": {}})
    assert Backup.get_by_id(backup.id).status == "completed"
    r = client.get(f"{P}/backups/{backup.id}/download", headers=bk.ro_key)
    assert r.status_code == 200 and r.json["use_streaming"] is True
    got = client.get(path_of(r.json["database_url"]))  # no auth header
    assert got.status_code == 200 and got.data == data
    ranged = client.get(path_of(r.json["database_url"]), headers={"Range": "bytes=5-9"})
    assert ranged.status_code == 206 and ranged.data == data[5:10]
