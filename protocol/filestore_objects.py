"""The filestore's `objects` layout, as the agent writes it and both sides read it.

A backup in this layout keeps no archive of its filestore. Each file is an
object of the environment's project named by the SHA-256 of its content, stored
once in a *pack*: a compressed tar whose members are named by their hashes
(`packs/<uuid>.tar.zst`, `.tar.gz` from a server without zstd). Every later
backup of the project with the same content names the same object. The
backup's *map* (MAP_OBJECT, one of its own objects) lists what its filestore
held: directories and files with their mode and owner, and for each file its
hash, size and the pack holding it. A restore writes each path from its pack's
member; an archive of the whole filestore (a download, Odoo's zip) is composed
from the packs. Either way every member's bytes are hashed and compared with
its name, so an object changed in storage is found, not restored."""

import contextlib
import gzip
import hashlib
import io
import json
import queue
import re
import tarfile
import tempfile
import threading

LAYOUT = "objects"
MAP_OBJECT = "filestore.map.json.gz"
SUFFIX = {"zstd": ".tar.zst", "gzip": ".tar.gz"}
PACK_NAME = re.compile(r"packs/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                       r"\.tar\.(zst|gz)")
SHA256 = re.compile(r"[0-9a-f]{64}")
CHUNK = 1024 * 1024
BLOCK = 512
ZEROS = bytes(BLOCK)
END = bytes(2 * BLOCK)  # a tar's end
MAP_MAX = 256 * 1024 * 1024  # a map's JSON, decompressed (about 2 million files)
# A map entry: [path, sha256 or None (a directory), size, pack or None, mode, uid, gid].
PATH, HASH, SIZE, PACK, MODE, UID, GID = range(7)


class LayoutError(ValueError):
    """A map, a pack or an object that is not what the layout says."""


def pack_name(pack_id, compression):
    return f"packs/{pack_id}{SUFFIX[compression]}"


def is_pack(name):
    return isinstance(name, str) and PACK_NAME.fullmatch(name) is not None


def compression_of(pack):
    return "zstd" if pack.endswith(".zst") else "gzip"


def encode_map(entries):
    return gzip.compress(json.dumps(entries, separators=(",", ":")).encode(), 6)


def decode_map(data):
    """The entries of a map object's bytes, each checked (LayoutError otherwise)."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            raw = f.read(MAP_MAX + 1)
        entries = json.loads(raw) if len(raw) <= MAP_MAX else None
    except (OSError, EOFError, ValueError) as exc:
        raise LayoutError(f"the filestore map is not gzip'd JSON: {exc}") from None
    if not isinstance(entries, list):
        raise LayoutError("the filestore map is not a list of entries")
    for entry in entries:
        _check(entry)
    return entries


def _check(entry):
    ok = (isinstance(entry, list) and len(entry) == 7 and safe_path(entry[PATH])
          and all(isinstance(entry[i], int) and entry[i] >= 0 for i in (SIZE, MODE, UID, GID)))
    if ok and entry[HASH] is None:
        ok = entry[PACK] is None
    elif ok:
        ok = (isinstance(entry[HASH], str) and SHA256.fullmatch(entry[HASH]) is not None
              and is_pack(entry[PACK]))
    if not ok:
        raise LayoutError(f"not a filestore map entry: {str(entry)[:200]}")


def safe_path(path):
    """A relative path without `.`, `..` or empty segments (a map names nothing else)."""
    return (isinstance(path, str) and 0 < len(path) <= 4096 and not path.startswith("/")
            and "\0" not in path and all(p not in ("", ".", "..") for p in path.split("/")))


def files(entries):
    return [e for e in entries if e[HASH] is not None]


def packs(entries):
    return sorted({e[PACK] for e in files(entries)})


def each_object(entries, open_pack):
    """(the entries of one object, a readable of its bytes) for every file of the
    map, pack by pack; `open_pack(name)` gives a pack's plain tar stream (a
    context manager). Once the caller moves on, the rest of the object is read
    and its SHA-256 compared with its name; an object no pack holds, or one that
    does not hash right, raises LayoutError."""
    for pack, objects in by_pack(entries).items():
        yield from in_pack(pack, objects, open_pack)


def by_pack(entries):
    """{pack: {sha256: [entries]}} of the map's files."""
    wanted = {}
    for entry in files(entries):
        wanted.setdefault(entry[PACK], {}).setdefault(entry[HASH], []).append(entry)
    return dict(sorted(wanted.items()))


def in_pack(pack, objects, open_pack):
    """each_object's of one pack: `objects` ({sha256: [entries]}) read from it."""
    objects = dict(objects)
    with open_pack(pack) as stream:
        for name, size, body in members(stream):
            found = objects.pop(name, None)
            if found is None:
                continue
            if size != found[0][SIZE]:
                raise LayoutError(f"object {name} in {pack} is {size} bytes, "
                                  f"not {found[0][SIZE]}")
            hashed = Hashed(body)
            yield found, hashed
            hashed.finish(name, size)
            if not objects:
                break
    if objects:
        raise LayoutError(f"{len(objects)} object(s) missing from {pack}, e.g. "
                          f"{next(iter(objects))}")


def members(stream):
    """(name, size, readable of its bytes) of each member of a pack's plain tar
    stream, read straight from `stream` (tarfile's stream mode copies its buffer
    on every read: minutes for a gigabyte). A pack holds regular files only."""
    while True:
        header = _exactly(stream, BLOCK)
        if not header or header == ZEROS:  # the end
            return
        if len(header) < BLOCK:
            raise LayoutError("the pack ends inside a header")
        try:
            info = tarfile.TarInfo.frombuf(header, "utf-8", "strict")
        except (tarfile.HeaderError, UnicodeDecodeError) as exc:
            raise LayoutError(f"not a tar header: {exc}") from None
        if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
            raise LayoutError(f"{info.name!r} is not a regular file")
        body = _Member(stream, info.size)
        yield info.name, info.size, body
        body.skip(-info.size % BLOCK)


def pack_header(name, size):
    """A pack member's tar header (GNU: the 64-hex name and any size fit)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "strict")


def write_tar(out, entries, open_pack):
    """The filestore as one plain tar written to `out`, composed from its packs
    (each object's bytes checked on the way)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT,
                      bufsize=CHUNK) as tar:
        tar.copybufsize = CHUNK
        for entry in entries:
            if entry[HASH] is None:
                tar.addfile(_info(entry, tarfile.DIRTYPE))
        for found, body in each_object(entries, open_pack):
            if len(found) == 1:
                tar.addfile(_info(found[0], tarfile.REGTYPE), body)
                continue
            with tempfile.SpooledTemporaryFile(16 * CHUNK) as copy:  # one content, two paths
                while chunk := body.read(CHUNK):
                    copy.write(chunk)
                for entry in found:
                    copy.seek(0)
                    tar.addfile(_info(entry, tarfile.REGTYPE), copy)


def compose(entries, open_pack, ahead=8):
    """write_tar's bytes as chunks, written on a thread at most `ahead` chunks
    ahead; its failure raises here, so the archive is cut short, never finished."""
    chunks, stop, end = queue.Queue(ahead), threading.Event(), object()

    class Out:
        def write(self, data):
            if stop.is_set():
                raise LayoutError("the reader stopped")
            chunks.put(bytes(data))
            return len(data)

    def run():
        try:
            write_tar(Out(), entries, open_pack)
            chunks.put(end)
        except BaseException as exc:  # noqa: BLE001  (raised on the reading side)
            chunks.put(exc)

    writer = threading.Thread(target=run, name="berth-compose", daemon=True)
    writer.start()
    try:
        while (item := chunks.get()) is not end:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while writer.is_alive():  # unblock a writer waiting on a full queue
            try:
                chunks.get(timeout=0.1)
            except queue.Empty:
                pass


class Chunks:
    """A readable over an iterable of byte chunks (what tarfile reads). A read
    returns at most the rest of the current chunk: no copy of what is left over."""

    def __init__(self, chunks):
        self.chunks, self.buf, self.at = iter(chunks), b"", 0

    def read(self, n=-1):
        if n < 0:  # all of it
            rest = b"".join([self.buf[self.at:], *self.chunks])
            self.buf, self.at = b"", 0
            return rest
        while self.at >= len(self.buf):
            chunk = next(self.chunks, None)
            if chunk is None:
                return b""
            self.buf, self.at = chunk, 0
        data = self.buf[self.at:self.at + n]
        self.at += len(data)
        return data

    def close(self):
        with contextlib.suppress(AttributeError):
            self.chunks.close()


def _info(entry, kind):
    info = tarfile.TarInfo(entry[PATH])
    info.type, info.mode, info.uid, info.gid = kind, entry[MODE] & 0o7777, entry[UID], entry[GID]
    info.size = entry[SIZE] if kind == tarfile.REGTYPE else 0
    return info


def _exactly(stream, n):
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


class _Member:
    """A member's bytes, `left` of them, read from the tar stream; an archive that
    ends before them is a LayoutError."""

    def __init__(self, stream, size):
        self.stream, self.left = stream, size

    def read(self, n=-1):
        n = self.left if n < 0 else min(n, self.left)
        if n == 0:
            return b""
        data = self.stream.read(n)
        if not data:
            raise LayoutError("the pack ends inside an object")
        self.left -= len(data)
        return data

    def skip(self, padding):
        while self.read(CHUNK):
            pass
        if len(_exactly(self.stream, padding)) < padding:
            raise LayoutError("the pack ends inside an object")


class Hashed:
    """A readable whose bytes are counted and hashed (SHA-256) as they are read."""

    def __init__(self, f):
        self.f, self.digest, self.size = f, hashlib.sha256(), 0

    def read(self, n=-1):
        data = self.f.read(n)
        self.digest.update(data)
        self.size += len(data)
        return data

    def readable(self):
        return True

    def close(self):
        self.f.close()

    def finish(self, name, size):
        """The rest read; LayoutError unless it was `size` bytes hashing to `name`."""
        while self.read(CHUNK):
            pass
        if self.size != size or self.digest.hexdigest() != name:
            raise LayoutError(f"object {name} does not hash right: {self.size} bytes, "
                              f"sha256 {self.digest.hexdigest()}")
