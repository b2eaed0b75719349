"""The filestore's objects layout, as both sides read it: a map names nothing
outside the filestore, and an object is only ever read whole and hashing to its
name."""

import contextlib
import gzip
import hashlib
import io
import json
import tarfile
import uuid

import pytest

from protocol import filestore_objects as fo

PACK = fo.pack_name(uuid.uuid4(), "zstd")


def sha(data):
    return hashlib.sha256(data).hexdigest()


def tar_of(members):
    """A pack's plain tar: {member name: bytes}."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def opener(packs):
    return lambda name: contextlib.closing(io.BytesIO(packs[name]))


def entry(path, data, pack=PACK):
    return [path, sha(data), len(data), pack, 0o644, 101, 101]


@pytest.mark.parametrize("bad", [
    ["../etc/passwd", "a" * 64, 1, PACK, 0o644, 0, 0],
    ["/etc/passwd", "a" * 64, 1, PACK, 0o644, 0, 0],
    ["a//b", "a" * 64, 1, PACK, 0o644, 0, 0],
    ["a/./b", "a" * 64, 1, PACK, 0o644, 0, 0],
    ["a", "A" * 64, 1, PACK, 0o644, 0, 0],
    ["a", "a" * 64, 1, "packs/../x.tar.zst", 0o644, 0, 0],
    ["a", "a" * 64, -1, PACK, 0o644, 0, 0],
    ["a", None, 0, PACK, 0o755, 0, 0],  # a directory names no pack
    ["a", "a" * 64, 1, PACK, 0o644, 0],
    "a",
])
def test_a_map_naming_anything_else_is_refused(bad):
    with pytest.raises(fo.LayoutError):
        fo.decode_map(fo.encode_map([bad]))


def test_a_map_that_is_not_one_is_refused():
    for data in (b"not gzip", gzip.compress(b"{}"), gzip.compress(b"[")):
        with pytest.raises(fo.LayoutError):
            fo.decode_map(data)
    entries = [["d", None, 0, None, 0o755, 0, 0], entry("d/f", b"x")]
    assert fo.decode_map(fo.encode_map(entries)) == json.loads(json.dumps(entries))


def test_objects_are_read_whole_and_checked():
    files = [entry("a/one", b"one"), entry("b/two", b"two"), entry("c/one-again", b"one")]
    packs = {PACK: tar_of({sha(b"one"): b"one", sha(b"two"): b"two", sha(b"x"): b"x"})}
    got = {}
    for found, body in fo.each_object(files, opener(packs)):
        data = body.read()
        for e in found:
            got[e[fo.PATH]] = data
    assert got == {"a/one": b"one", "b/two": b"two", "c/one-again": b"one"}

    # Changed in storage: the same size, other bytes.
    packs = {PACK: tar_of({sha(b"one"): b"oNe", sha(b"two"): b"two"})}
    with pytest.raises(fo.LayoutError, match="does not hash right"):
        list(fo.each_object(files, opener(packs)))
    # Missing from its pack.
    packs = {PACK: tar_of({sha(b"two"): b"two"})}
    with pytest.raises(fo.LayoutError, match="missing"):
        list(fo.each_object(files, opener(packs)))


def test_a_composed_archive_holds_every_path_or_is_cut_short():
    files = [["a", None, 0, None, 0o750, 101, 101], entry("a/one", b"one"),
             entry("a/same", b"one"), entry("b", b"two")]
    packs = {PACK: tar_of({sha(b"one"): b"one", sha(b"two"): b"two"})}
    data = b"".join(fo.compose(files, opener(packs)))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: (m.type, m.mode, m.uid) for m in tar}
        contents = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    assert contents == {"a/one": b"one", "a/same": b"one", "b": b"two"}
    assert members["a"] == (tarfile.DIRTYPE, 0o750, 101)
    assert data == b"".join(fo.compose(files, opener(packs)))  # the same bytes every time
    packs = {PACK: tar_of({sha(b"one"): b"one", sha(b"two"): b"tw0"})}
    with pytest.raises(fo.LayoutError):
        b"".join(fo.compose(files, opener(packs)))


def test_chunks_read_back_as_they_came():
    chunks = fo.Chunks([b"abc", b"", b"defg"])
    assert [chunks.read(2), chunks.read(2), chunks.read(10), chunks.read(10)] == \
        [b"ab", b"c", b"defg", b""]
    whole = fo.Chunks([b"x" * 5, b"y" * 3])
    assert whole.read(2) == b"xx" and whole.read() == b"xxxyyy" and whole.read() == b""
