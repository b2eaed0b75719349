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


def test_a_restore_links_the_files_the_live_filestore_holds_unchanged(tmp_path):
    """Content never changes in place, so a file the live filestore holds with the
    hash the map names (unchanged since it was hashed) is linked, not downloaded; a
    changed one, or one of another mode, is not."""
    live, cache = tmp_path / "filestore", tmp_path / objects.HASHES
    (live / "odoo" / "ab").mkdir(parents=True)
    for name in ("one", "two", "three"):
        (live / "odoo" / "ab" / name).write_bytes(name.encode())
    entries = objects.scan(live, cache)
    (live / "odoo" / "ab" / "two").write_bytes(b"TWO")  # after it was hashed
    os.chmod(live / "odoo" / "ab" / "three", 0o600)  # not as the map says
    local = objects.local_copies(live, cache)
    assert set(local) == {sha(b"one"), sha(b"three")}
    new = tmp_path / "filestore.new"
    new.mkdir()
    wanted = [e for e in entries if e[fo.HASH] in (None, sha(b"one"))]
    assert objects.unpack(None, None, new, entries=wanted, local=local) == 1
    assert os.stat(new / "odoo" / "ab" / "one").st_ino == \
        os.stat(live / "odoo" / "ab" / "one").st_ino
    three = [e for e in entries if e[fo.HASH] == sha(b"three")]
    checked = {}
    assert not objects._linked(local, new, three[0], checked) and checked == {}
