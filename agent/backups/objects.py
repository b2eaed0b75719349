"""The filestore backed up as objects of its project, and restored from them
(the `objects` layout: protocol/filestore_objects.py).

A backup walks the filestore and hashes each file (SHA-256; a file whose size,
mtime and inode are those of the last backup keeps its hash, from HASHES in the
environment's directory), asks the control plane which hashes the project
already holds, and uploads only the others, in packs of about PACK_BYTES. The
control plane reads each pack back and hashes every member before it records
its objects. Then the map goes up: the backup's filestore is what it lists.

A restore reads the map, downloads the packs it names and writes each path from
its member, hashing every byte on the way (an object that does not hash right
fails the restore)."""

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from agent.backups import archive
from agent.backups.transfer import Checked
from agent.config import write_private
from agent.errors import AgentError
from protocol import filestore_objects as fo
from protocol.errors import AgentErrorCode

HASHES = ".berth-filestore-hashes.json"  # {path: [size, mtime_ns, inode, sha256]}
PACK_BYTES = 128 * 1024 * 1024  # a pack closes after this many bytes of files
ASK = 5000  # hashes per question to the control plane
PARALLEL = 2  # packs unpacked at once
COPY = 256 * 1024  # bytes of an object moved at a time (less memory held per thread)


class ObjectsError(AgentError):
    code = AgentErrorCode.ARCHIVE_FAILED


def scan(filestore, hashes_file):
    """The map's entries for the directory `filestore`, packs not yet known:
    directories, then files with their hashes (links and devices are left out, as
    Odoo makes none)."""
    try:
        cache = json.loads(hashes_file.read_text())
    except (OSError, ValueError):
        cache = {}
    entries, fresh, unknown = [], {}, []
    for root, dirs, names in os.walk(filestore):
        dirs.sort()
        for name in dirs + sorted(names):
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # removed meanwhile (Odoo's garbage collector)
                continue
            entry = [os.path.relpath(path, filestore), None, 0, None, st.st_mode & 0o7777,
                     st.st_uid, st.st_gid]
            if stat.S_ISDIR(st.st_mode):
                entries.append(entry)
            elif stat.S_ISREG(st.st_mode):
                entry[fo.SIZE] = st.st_size
                key, cached = [st.st_size, st.st_mtime_ns, st.st_ino], cache.get(entry[fo.PATH])
                if isinstance(cached, list) and cached[:3] == key:
                    entry[fo.HASH] = cached[3]
                else:
                    unknown.append(entry)
                fresh[entry[fo.PATH]] = key
                entries.append(entry)
    removed = set()
    with ThreadPoolExecutor(PARALLEL, thread_name_prefix="berth-hash") as pool:  # 2 cores
        hashed = pool.map(lambda e: _hash(filestore, e), unknown)
        for entry, sha in zip(unknown, hashed, strict=True):
            entry[fo.HASH] = sha
            if sha is None:
                removed.add(entry[fo.PATH])
    entries = [e for e in entries if e[fo.PATH] not in removed]
    write_private(hashes_file, json.dumps(
        {e[fo.PATH]: [*fresh[e[fo.PATH]], e[fo.HASH]] for e in entries if e[fo.HASH]},
        separators=(",", ":")))
    return entries


def _hash(filestore, entry):
    """The file's SHA-256, or None when it was removed meanwhile."""
    try:
        with open(os.path.join(filestore, entry[fo.PATH]), "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def back_up(transfer, filestore, hashes_file, kind, upload, log):
    """The filestore's part of the manifest: its new objects uploaded in packs,
    then its map. `upload(name, chunks, deferred=False)` uploads one object and
    returns its {size, sha256} as read back (deferred: a function that completes
    it and returns that): a pack's read-back by the control plane runs on a thread
    while the next pack goes up."""
    entries = scan(filestore, hashes_file)
    wanted = sorted({e[fo.HASH] for e in fo.files(entries)})
    known = {}
    for i in range(0, len(wanted), ASK):
        known.update(transfer.known(wanted[i:i + ASK]))
    new, gone = {}, set()
    for entry in fo.files(entries):
        if entry[fo.HASH] not in known:
            new.setdefault(entry[fo.HASH], entry)
    log("info", f"filestore: {len(fo.files(entries))} files, {len(wanted) - len(new)} of "
                f"their {len(wanted)} objects already stored, {len(new)} to upload")
    with ThreadPoolExecutor(1, thread_name_prefix="berth-complete") as completing:
        completed = []
        for batch in _batches(list(new.values())):
            name = fo.pack_name(uuid.uuid4(), kind)
            complete = upload(name, _pack(filestore, batch, kind, gone), deferred=True)
            completed.append(completing.submit(complete))
            known.update((e[fo.HASH], name) for e in batch if e[fo.PATH] not in gone)
        uploaded = sum(done.result()["size"] for done in completed)
    entries = [e for e in entries if e[fo.PATH] not in gone]
    for entry in fo.files(entries):
        entry[fo.PACK] = known[entry[fo.HASH]]
    stored = upload(fo.MAP_OBJECT, [fo.encode_map(entries)])
    files = fo.files(entries)
    return {"layout": fo.LAYOUT, "object": fo.MAP_OBJECT, **stored, "compression": kind,
            "files": len(files), "raw_size": sum(e[fo.SIZE] for e in files),
            "packs": fo.packs(entries), "new_objects": len(new) - len(gone),
            "new_bytes": sum(e[fo.SIZE] for e in new.values() if e[fo.PATH] not in gone),
            "uploaded_bytes": uploaded}


def _batches(entries):
    batch, size = [], 0
    for entry in entries:
        batch.append(entry)
        size += entry[fo.SIZE]
        if size >= PACK_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _pack(filestore, batch, kind, gone):
    """A pack's compressed bytes: a tar of the batch's files named by their hashes,
    written on a thread into the compressor with sendfile(2) (the bytes go from the
    page cache to the pipe, never through Python); a file removed meanwhile is
    left out and added to `gone`. The control plane hashes every member again."""
    comp = archive._spawn(archive._compressor(kind), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE)
    archive._widen(comp.stdin, comp.stdout)
    err, failed = archive._Tail(comp.stderr), []

    def write():
        try:
            pipe = comp.stdin.fileno()
            for entry in batch:
                _add(pipe, filestore, entry, gone)
            _write_all(pipe, fo.END)
        except BaseException as exc:  # noqa: BLE001  (raised on the reading side)
            failed.append(exc)
        finally:
            with contextlib.suppress(OSError):
                comp.stdin.close()

    writer = threading.Thread(target=write, name="berth-pack", daemon=True)
    writer.start()
    finished = False
    try:
        while data := comp.stdout.read(fo.CHUNK):
            yield data
        finished = True
    finally:
        if not finished:
            comp.kill()
        comp.stdout.close()
        comp.wait()
        writer.join()
    if failed:
        raise failed[0]
    if comp.returncode != 0:
        raise ObjectsError(f"{kind} failed (exit code {comp.returncode}): {err}")


def _add(pipe, filestore, entry, gone):
    try:
        fd = os.open(os.path.join(filestore, entry[fo.PATH]), os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        gone.add(entry[fo.PATH])
        return
    try:
        size = entry[fo.SIZE]
        _write_all(pipe, fo.pack_header(entry[fo.HASH], size))
        sent = 0
        while sent < size:
            n = os.sendfile(pipe, fd, sent, min(size - sent, 1 << 30))
            if n == 0:  # Odoo never writes a file in place
                raise ObjectsError(f"{entry[fo.PATH]} shrank while it was backed up")
            sent += n
        _write_all(pipe, bytes(-size % fo.BLOCK))
    finally:
        os.close(fd)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# --- restore ------------------------------------------------------------------

def read_map(transfer, fs):
    """The backup's map, checked against the manifest's size and SHA-256."""
    chunks = Checked(transfer.download(fs["object"]))
    data = b"".join(chunks)
    if (chunks.size, chunks.sha256) != (fs.get("size"), fs.get("sha256")):
        raise ObjectsError(f"{fs['object']} in storage does not match its checksum")
    try:
        return fo.decode_map(data)
    except fo.LayoutError as exc:
        raise ObjectsError(str(exc)) from None


def _opener(transfer):
    def open_pack(name):
        return contextlib.closing(archive.Decompressed(transfer.download(name),
                                                       fo.compression_of(name), ObjectsError))
    return open_pack


def local_copies(live, hashes_file):
    """{sha256: (path, stat)} of the files of the filestore `live` whose hash its
    HASHES file holds and that have not changed since (size, mtime and inode): a
    restore links them instead of downloading them (a file's content never changes
    in place: Odoo names it by its content)."""
    try:
        cache = json.loads(hashes_file.read_text())
    except (OSError, ValueError):
        return {}
    found = {}
    for path, record in cache.items() if isinstance(cache, dict) else ():
        if not (isinstance(record, list) and len(record) == 4):
            continue
        full = os.path.join(live, path)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and [st.st_size, st.st_mtime_ns, st.st_ino] == record[:3]:
            found.setdefault(record[3], (full, st))
    return found


def _linked(local, target, entry, checked):
    """The entry's file as a link to a local copy of its content, if one has its
    mode and owner; whether it was."""
    found = local.get(entry[fo.HASH])
    if found is None:
        return False
    source, st = found
    if (st.st_mode & 0o7777, st.st_uid, st.st_gid) != tuple(entry[fo.MODE:fo.GID + 1]):
        return False
    path = os.path.join(target, entry[fo.PATH])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.link(source, path)
    except OSError:  # another file system, a link count at its limit: downloaded instead
        return False
    checked[entry[fo.PATH]] = [st.st_size, st.st_mtime_ns, st.st_ino, entry[fo.HASH]]
    return True


def unpack(transfer, fs, target, progress=None, finished=None, hashes_file=None, entries=None,
           local=None):
    """The backup's filestore written into the existing directory `target`, each
    object from its pack, hashed; returns the files written. Two packs at once (each
    its own download and decompressor): on 2 cores, one's hashing overlaps the
    other's writes. `finished(path)`: each file written (relative, as bytes).
    `hashes_file`: the hashes just checked kept for the next backup's scan (a
    restored filestore is not hashed again; a rolled back one's files do not match
    the entries and are). `entries`: these, not the map's (a point-in-time restore's
    choice of several maps' files). `local`: local_copies() of the live filestore,
    linked rather than downloaded."""
    entries = read_map(transfer, fs) if entries is None else entries
    for entry in entries:
        if entry[fo.HASH] is None:
            path = os.path.join(target, entry[fo.PATH])
            os.makedirs(path, exist_ok=True)
            _own(path, entry)
    done, lock, checked = [0, 0], threading.Lock(), {}
    if local:
        linked = {e[fo.PATH] for e in fo.files(entries) if _linked(local, target, e, checked)}
        done[0] = len(linked)
        entries = [e for e in entries if e[fo.PATH] not in linked]

    def one(pack, wanted):
        for found, body in fo.in_pack(pack, wanted, _opener(transfer)):
            first = os.path.join(target, found[0][fo.PATH])
            os.makedirs(os.path.dirname(first), exist_ok=True)
            with open(first, "wb") as out:
                shutil.copyfileobj(body, out, COPY)
            for entry in found[1:]:  # one content at several paths
                shutil.copyfile(first, os.path.join(target, entry[fo.PATH]))
            for entry in found:
                path = os.path.join(target, entry[fo.PATH])
                _own(path, entry)
                st = os.stat(path)
                checked[entry[fo.PATH]] = [st.st_size, st.st_mtime_ns, st.st_ino, entry[fo.HASH]]
                if finished:
                    finished(os.fsencode(entry[fo.PATH]))
            with lock:
                done[0] += len(found)
                done[1] += found[0][fo.SIZE]
                if progress:
                    progress(done[1])

    try:
        with ThreadPoolExecutor(PARALLEL, thread_name_prefix="berth-unpack") as pool:
            for result in [pool.submit(one, pack, wanted)
                           for pack, wanted in fo.by_pack(entries).items()]:
                result.result()
    except fo.LayoutError as exc:
        raise ObjectsError(f"the backup's filestore objects do not check: {exc}") from None
    if hashes_file is not None:
        write_private(hashes_file, json.dumps(checked, separators=(",", ":")))
    return done[0]


def tar_stream(transfer, fs):
    """The backup's filestore as one readable plain tar (Odoo's zip is made from it)."""
    entries = read_map(transfer, fs)
    return fo.Chunks(fo.compose(entries, _opener(transfer)))


def _own(path, entry):
    os.chmod(path, entry[fo.MODE])
    with contextlib.suppress(PermissionError):  # an agent not run as root keeps its own
        os.chown(path, entry[fo.UID], entry[fo.GID])
