"""The agent's side of filestore objects, on a real directory: each file hashed
once (a file whose size, mtime or inode changed is hashed again), links and
devices left out, and a file removed while its pack is written left out of the
pack and of the backup."""

import gzip
import hashlib
import io
import os

from agent.backups import objects
from protocol import filestore_objects as fo


def sha(data):
    return hashlib.sha256(data).hexdigest()


def test_a_file_is_hashed_again_only_when_it_changed(tmp_path):
    store, cache = tmp_path / "filestore", tmp_path / objects.HASHES
    (store / "odoo" / "ab").mkdir(parents=True)
    (store / "odoo" / "ab" / "one").write_bytes(b"one")
    (store / "odoo" / "ab" / "two").write_bytes(b"two")
    os.symlink("/etc/passwd", store / "odoo" / "link")
    first = {e[fo.PATH]: e[fo.HASH] for e in objects.scan(store, cache)}
    assert first == {"odoo": None, "odoo/ab": None, "odoo/ab/one": sha(b"one"),
                     "odoo/ab/two": sha(b"two")}
    # The cache is what makes the next backup cheap; it is trusted only while size,
    # mtime and inode are the file's.
    (store / "odoo" / "ab" / "two").write_bytes(b"TWO")
    again = {e[fo.PATH]: e[fo.HASH] for e in objects.scan(store, cache)}
    assert again["odoo/ab/two"] == sha(b"TWO") and again["odoo/ab/one"] == sha(b"one")
    cache.write_text("not json")  # a damaged cache: every file hashed again
    assert {e[fo.PATH]: e[fo.HASH] for e in objects.scan(store, cache)} == again


def test_a_file_removed_while_packed_is_left_out(tmp_path):
    store, cache = tmp_path / "filestore", tmp_path / objects.HASHES
    store.mkdir()
    for name in ("a", "b"):
        (store / name).write_bytes(name.encode() * 1000)
    entries = objects.scan(store, cache)
    (store / "a").unlink()
    gone = set()
    packed = b"".join(objects._pack(store, fo.files(entries), "gzip", gone))
    assert gone == {"a"}
    got = {name: body.read() for name, _, body in fo.members(io.BytesIO(gzip.decompress(packed)))}
    assert got == {sha(b"b" * 1000): b"b" * 1000}
