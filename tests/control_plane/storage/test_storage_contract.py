"""The storage interface, the same on both backends, exercised as the agent uses
it: parts PUT to the URLs with plain HTTP, the object fetched from its URL."""

import hashlib
import os
import uuid

import pytest
import requests

from control_plane import storage
from control_plane.storage.local import LocalStorage
from control_plane.storage.s3 import S3Storage
from control_plane.vocabulary import errors

MIB = 1024 * 1024


def _key(name="database.dump"):
    return f"backups/{uuid.uuid4()}/{uuid.uuid4()}/{name}"


def _upload(store, key, parts):
    upload_id = store.begin_upload(key)
    done = []
    for number, data in enumerate(parts, 1):
        answer = requests.put(store.part_url(key, upload_id, number), data=data, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.headers["ETag"].strip('"')  # S3's is the part's MD5; ours, its nonce
        done.append((number, answer.headers["ETag"]))
    store.complete_upload(key, upload_id, done)


def test_the_backend_says_how_urls_are_served(store):
    assert store.streaming is isinstance(store, LocalStorage)
    assert isinstance(store, LocalStorage | S3Storage)


def test_a_multipart_upload_round_trip(store):
    key = _key()
    parts = [os.urandom(5 * MIB + 11), os.urandom(5 * MIB + 3), b"the last part" * 10]
    whole = b"".join(parts)
    _upload(store, key, parts)
    assert store.size(key) == len(whole)

    url = store.get_url(key, filename="db.dump")
    got = requests.get(url, timeout=60)
    assert got.status_code == 200
    assert got.content == whole
    assert int(got.headers["Content-Length"]) == len(whole)
    assert got.headers["Accept-Ranges"] == "bytes"
    assert "attachment" in got.headers["Content-Disposition"]
    assert "db.dump" in got.headers["Content-Disposition"]

    # A download resumes: a range, then the rest from an offset, then a suffix.
    first = requests.get(url, headers={"Range": "bytes=100-5242979"}, timeout=60)
    assert first.status_code == 206
    assert first.content == whole[100:5242980]
    assert first.headers["Content-Range"] == f"bytes 100-5242979/{len(whole)}"
    rest = requests.get(url, headers={"Range": "bytes=5242980-"}, timeout=60)
    assert rest.status_code == 206 and rest.content == whole[5242980:]
    tail = requests.get(url, headers={"Range": "bytes=-7"}, timeout=60)
    assert tail.status_code == 206 and tail.content == whole[-7:]

    body = store.open(key)
    try:
        assert body.read() == whole
    finally:
        body.close()
    assert storage.read_back(store, key) == {"size": len(whole),
                                             "sha256": hashlib.sha256(whole).hexdigest()}


def test_a_download_url_without_a_filename_is_not_an_attachment(store):
    key = _key("manifest.json")
    _upload(store, key, [b'{"format": "berth-backup/1"}'])
    got = requests.get(store.get_url(key), timeout=30)
    assert got.status_code == 200 and got.content == b'{"format": "berth-backup/1"}'
    assert "attachment" not in got.headers.get("Content-Disposition", "")


def test_a_suffix_longer_than_the_object_is_the_whole_object(store):
    """RFC 9110: `bytes=-N` past the start means all of it (how a reader learns a
    small object's size with its first request)."""
    key = _key("small.zip")
    _upload(store, key, [b"0123456789"])
    got = requests.get(store.get_url(key), headers={"Range": "bytes=-65536"}, timeout=30)
    assert got.status_code == 206 and got.content == b"0123456789"
    assert got.headers["Content-Range"] == "bytes 0-9/10"


def test_an_absent_object(store):
    key = _key()
    assert store.size(key) is None
    with pytest.raises(FileNotFoundError):
        store.open(key)
    assert store.delete_prefix(key.rsplit("/", 1)[0] + "/") == 0


def test_delete_prefix_removes_what_is_under_it_only(store):
    base = f"backups/{uuid.uuid4()}"
    keys = [f"{base}/b1/database.dump", f"{base}/b1/manifest.json", f"{base}/b2/database.dump"]
    for key in keys:
        _upload(store, key, [key.encode()])
    assert store.delete_prefix(f"{base}/b1/") == 2
    assert store.size(keys[0]) is None and store.size(keys[1]) is None
    assert store.size(keys[2]) == len(keys[2])
    assert store.delete_prefix(f"{base}/") == 1
    assert store.size(keys[2]) is None


def test_an_aborted_upload_cannot_be_completed(store):
    key = _key()
    upload_id = store.begin_upload(key)
    answer = requests.put(store.part_url(key, upload_id, 1), data=b"x" * 100, timeout=30)
    assert answer.status_code == 200
    store.abort_upload(key, upload_id)
    again = requests.put(store.part_url(key, upload_id, 2), data=b"x" * 100, timeout=30)
    assert not again.ok  # 404 NoSuchUpload (moto: a 500)
    if isinstance(store, LocalStorage):  # moto answers a 500 here too
        with pytest.raises(errors.UploadNotFound):
            store.complete_upload(key, upload_id, [(1, answer.headers["ETag"])])
    assert store.size(key) is None
    store.abort_upload(key, upload_id)  # twice: nothing to do


def test_a_wrong_etag_is_refused(store):
    key = _key()
    upload_id = store.begin_upload(key)
    answer = requests.put(store.part_url(key, upload_id, 1), data=b"y" * 100, timeout=30)
    assert answer.status_code == 200
    with pytest.raises(errors.InvalidPart):
        store.complete_upload(key, upload_id, [(1, '"' + "0" * 32 + '"')])
    assert store.size(key) is None


def test_a_part_sent_again_replaces_it(store):
    key = _key()
    upload_id = store.begin_upload(key)
    etags = []
    for data in (b"a" * 100, b"b" * 50):
        answer = requests.put(store.part_url(key, upload_id, 1), data=data, timeout=30)
        assert answer.status_code == 200
        etags.append(answer.headers["ETag"])
    with pytest.raises(errors.InvalidPart):
        store.complete_upload(key, upload_id, [(1, etags[0])])
    with pytest.raises(errors.InvalidPart):  # a part never sent
        store.complete_upload(key, upload_id, [(1, etags[1]), (2, etags[0])])
    store.complete_upload(key, upload_id, [(1, etags[1])])
    body = store.open(key)
    try:
        assert body.read() == b"b" * 50
    finally:
        body.close()


@pytest.mark.parametrize("bad", ["../etc/passwd", "/abs/key", "a//b", "", "a/./b", "a/../b",
                                 "a/b/", "a\\b", "a/b\x00"])
def test_keys_are_checked(store, bad):
    with pytest.raises(ValueError):
        store.begin_upload(bad)
    with pytest.raises(ValueError):
        store.get_url(bad)
