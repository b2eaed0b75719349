"""The local backend's signed URLs, served by a real `berth serve`: expired,
tampered, replayed or misused tokens are refused before anything is read or
written; ranges past the end are a 416; a part is at most 64 MiB."""

import os
import re
import socket
import stat
import time
import uuid

import pytest
import requests
from itsdangerous import URLSafeSerializer

from control_plane import storage
from control_plane.storage import tokens
from control_plane.vocabulary import errors
from tests.control_plane.storage.conftest import SECRET
from tests.support.waiting import wait_for


def _key(name="database.dump"):
    return f"backups/{uuid.uuid4()}/{uuid.uuid4()}/{name}"


def _stored(store, data):
    key = _key()
    upload_id = store.begin_upload(key)
    answer = requests.put(store.part_url(key, upload_id, 1), data=data, timeout=30)
    store.complete_upload(key, upload_id, [(1, answer.headers["ETag"])])
    return key


def _refused(answer, code, status=403):
    assert answer.status_code == status, answer.text
    assert answer.json() == {"error": code, "message": answer.json()["message"]}


def _token_url(store, claims, secret=SECRET):
    token = URLSafeSerializer(secret, salt=tokens.SALT).dumps(claims)
    return store.get_url(_key()).rsplit("/", 1)[0] + "/" + token


def test_an_expired_url_is_refused(local_store):
    key = _stored(local_store, b"data")
    _refused(requests.get(local_store.get_url(key, expires=-1), timeout=10),
             errors.StorageUrlExpired.code)
    upload_id = local_store.begin_upload(key)
    url = local_store.part_url(key, upload_id, 1, expires=-1)
    _refused(requests.put(url, data=b"new", timeout=10), errors.StorageUrlExpired.code)
    assert not any((local_store.root / "uploads" / upload_id).glob("00001*"))


def test_a_tampered_url_is_refused(local_store):
    key = _stored(local_store, b"secret data")
    url = local_store.get_url(key)
    payload, signature = url.rsplit(".", 1)
    flipped = signature[:5] + ("A" if signature[5] != "A" else "B") + signature[6:]
    _refused(requests.get(f"{payload}.{flipped}", timeout=10), errors.StorageUrlInvalid.code)
    # Another key's claims under this URL's signature.
    other = local_store.get_url(_stored(local_store, b"other"))
    _refused(requests.get(other.rsplit(".", 1)[0] + "." + signature, timeout=10),
             errors.StorageUrlInvalid.code)
    # Claims signed with another secret.
    forged = _token_url(local_store, {"op": "get", "key": key, "exp": int(time.time()) + 60},
                        secret="not-the-secret")
    _refused(requests.get(forged, timeout=10), errors.StorageUrlInvalid.code)
    _refused(requests.get(url[:-40], timeout=10), errors.StorageUrlInvalid.code)


def test_a_signed_key_outside_the_store_is_refused(local_store):
    """Even a validly signed token names no path outside the objects."""
    for key in ("../secret_key", "../../secret_key", "/etc/passwd"):
        url = _token_url(local_store, {"op": "get", "key": key, "exp": int(time.time()) + 60})
        _refused(requests.get(url, timeout=10), errors.StorageUrlInvalid.code)


def test_an_upload_url_is_used_once(local_store):
    key = _key()
    upload_id = local_store.begin_upload(key)
    url = local_store.part_url(key, upload_id, 1)
    first = requests.put(url, data=b"first", timeout=10)
    assert first.status_code == 200
    assert re.fullmatch(r'"[0-9a-f]{32}"', first.headers["ETag"])
    _refused(requests.put(url, data=b"second", timeout=10), errors.StorageUrlUsed.code)
    local_store.complete_upload(key, upload_id, [(1, first.headers["ETag"])])
    assert requests.get(local_store.get_url(key), timeout=10).content == b"first"


def test_a_download_url_serves_again_until_it_expires(local_store):
    key = _stored(local_store, b"0123456789")
    url = local_store.get_url(key)
    for _ in range(3):
        assert requests.get(url, headers={"Range": "bytes=2-4"}, timeout=10).content == b"234"


def test_tokens_are_for_their_operation_only(local_store):
    key = _stored(local_store, b"data")
    upload_id = local_store.begin_upload(key)
    put_url = local_store.part_url(key, upload_id, 1)
    _refused(requests.get(put_url, timeout=10), errors.StorageUrlInvalid.code)
    _refused(requests.put(local_store.get_url(key), data=b"x", timeout=10),
             errors.StorageUrlInvalid.code)
    assert requests.put(put_url, data=b"x", timeout=10).status_code == 200  # not spent


def test_a_range_past_the_end_is_416(local_store):
    key = _stored(local_store, b"0123456789")
    url = local_store.get_url(key)
    for bad in ("bytes=10-", "bytes=20-30"):
        answer = requests.get(url, headers={"Range": bad}, timeout=10)
        _refused(answer, errors.RangeNotSatisfiable.code, status=416)
        assert answer.headers["Content-Range"] == "bytes */10"
    whole = requests.get(url, headers={"Range": "bytes=5-100"}, timeout=10)
    assert whole.status_code == 206 and whole.content == b"56789"


def test_an_absent_object_is_404(local_store):
    _refused(requests.get(local_store.get_url(_key()), timeout=10), errors.NotFound.code, 404)


@pytest.mark.slow
def test_a_part_over_64_mib_is_refused(local_store):
    key = _key()
    upload_id = local_store.begin_upload(key)
    url = local_store.part_url(key, upload_id, 1)
    big = b"\0" * (storage.PART_MAX + 1)
    _refused(requests.put(url, data=big, timeout=120), errors.PartTooLarge.code, status=413)
    assert not any((local_store.root / "uploads" / upload_id).glob("00001*"))
    # Exactly the limit is accepted, through the same (unspent) URL.
    answer = requests.put(url, data=memoryview(big)[:-1], timeout=120)
    assert answer.status_code == 200
    del big
    local_store.complete_upload(key, upload_id, [(1, answer.headers["ETag"])])
    assert local_store.size(key) == storage.PART_MAX


def test_part_bodies_spool_beside_the_parts_and_nothing_is_left(local_store):
    """The server writes a part's body into the storage's own directory as it
    arrives (then it is moved into place); a refused, oversized or broken
    upload leaves no spooled file behind."""
    uploads = local_store.root / "uploads"
    key = _key()
    upload_id = local_store.begin_upload(key)
    answer = requests.put(local_store.part_url(key, upload_id, 1), data=b"x" * 3_000_000,
                          timeout=30)
    assert answer.status_code == 200
    _refused(requests.put(local_store.part_url(key, upload_id, 2, expires=-1), data=b"y" * 5000,
                          timeout=10), errors.StorageUrlExpired.code)
    _refused(requests.put(local_store.part_url(key, upload_id, 2),
                          data=b"\0" * (storage.PART_MAX + 1), timeout=120),
             errors.PartTooLarge.code, status=413)
    host, port = re.match(r"http://([^:/]+):(\d+)", local_store.part_url(key, upload_id, 2)).groups()
    path = local_store.part_url(key, upload_id, 2).split(f":{port}", 1)[1]
    with socket.create_connection((host, int(port)), timeout=10) as sock:  # cut off mid-body
        sock.sendall(f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000000\r\n"
                     "\r\n".encode() + b"z" * 400_000)
        wait_for(lambda: list(uploads.glob(".spool-*")), timeout=10,
                 what="the body being spooled")
    wait_for(lambda: not list(uploads.glob(".spool-*")), timeout=10,
             what="the spooled body removed", detail=lambda: list(uploads.glob(".spool-*")))
    local_store.complete_upload(key, upload_id, [(1, answer.headers["ETag"])])
    assert storage.read_back(local_store, key)["size"] == 3_000_000


def test_other_routes_keep_the_1_mib_limit(served_storage):
    answer = requests.post(served_storage.url + "/api/v1/projects",
                           data=b"{" + b" " * (2 * 1024 * 1024) + b"}",
                           headers={"Content-Type": "application/json"}, timeout=30)
    assert answer.status_code == 413


def test_stored_files_are_owner_only(local_store):
    key = _stored(local_store, b"data")
    local_store.begin_upload(_key())
    for root, dirs, files in os.walk(local_store.root):
        for name in dirs + files:
            mode = stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode)
            assert mode & 0o077 == 0, (os.path.join(root, name), oct(mode))
    assert local_store.size(key) == 4


def test_parts_are_joined_where_copy_file_range_is_refused(local_store, monkeypatch):
    def refused(*args):
        raise OSError(18, "Invalid cross-device link")
    monkeypatch.setattr(os, "copy_file_range", refused)
    key = _key()
    upload_id = local_store.begin_upload(key)
    parts = [os.urandom(3000), os.urandom(2000), b"end"]
    done = []
    for number, data in enumerate(parts, 1):
        answer = requests.put(local_store.part_url(key, upload_id, number), data=data,
                              timeout=30)
        done.append((number, answer.headers["ETag"]))
    local_store.complete_upload(key, upload_id, done)
    assert local_store.object_path(key).read_bytes() == b"".join(parts)
    assert not (local_store.root / "uploads" / upload_id).exists()


def test_an_abort_during_the_join_is_upload_not_found(local_store, monkeypatch):
    """An abort (a newer export's, say) that lands while a completion joins the
    parts: the completion is refused as the store's UploadNotFound (a 404 to the
    agent), not a raw FileNotFoundError (a 500); no object and no partial file
    are left. The race is forced: the abort runs inside the first part's append."""
    key = _key()
    upload_id = local_store.begin_upload(key)
    done = []
    for number, data in enumerate([os.urandom(3000), os.urandom(2000), b"end"], 1):
        answer = requests.put(local_store.part_url(key, upload_id, number), data=data,
                              timeout=30)
        done.append((number, answer.headers["ETag"]))
    real, aborted = os.copy_file_range, []

    def abort_then_copy(*args):
        if not aborted:
            aborted.append(local_store.abort_upload(key, upload_id))
        return real(*args)
    monkeypatch.setattr(os, "copy_file_range", abort_then_copy)
    with pytest.raises(errors.UploadNotFound):
        local_store.complete_upload(key, upload_id, done)
    assert aborted and local_store.size(key) is None
    folder = local_store.object_path(key).parent
    assert not folder.exists() or not any(folder.iterdir())
