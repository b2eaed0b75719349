"""Odoo's own backup format, both ways: the zip its database manager and
Odoo.sh produce and accept (`dump.sql`: plain pg_dump; `filestore/`: the
database's filestore directory; `manifest.json`), written as a stream, and
imports (such a zip, or a bare custom-format or plain dump) checked before
anything of them reaches a database or a disk.

Memory stays bounded: members are streamed in chunks, never held whole. Imports
are hostile until proven otherwise: names, member types and sizes are checked
from the central directory, and the sizes again while bytes are extracted,
because declared sizes can lie."""

import json
import os
import re
import shutil
import stat
import struct
import tarfile
import time
import zipfile
import zlib
from dataclasses import dataclass

from agent.errors import AgentError
from agent.range_file import DownloadFailed, RangeFile  # noqa: F401  (part of this API)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
CHUNK = MiB
DUMP, MANIFEST, FILESTORE = "dump.sql", "manifest.json", "filestore/"
PLAIN_HEADER = b"--\n-- PostgreSQL database dump"
CUSTOM_MAGIC = b"PGDMP"


@dataclass(frozen=True)
class Limits:
    max_total: int = 100 * GiB        # uncompressed bytes of all members
    max_members: int = 1_000_000
    max_ratio: int = 200              # uncompressed:compressed, per member ...
    ratio_floor: int = 10 * MiB       # ... once the member is larger than this
    max_directory: int = 128 * MiB    # central directory bytes (zipfile holds it whole)
    max_manifest: int = 4 * MiB


DEFAULT_LIMITS = Limits()


class ImportRefused(AgentError):
    """The import was refused."""

    code = "import_refused"


class UnrecognisedImport(ImportRefused):
    """Neither an Odoo backup zip, nor a custom-format dump, nor pg_dump's plain output."""

    code = "import_unrecognised"


class CorruptImport(ImportRefused):
    """The zip is damaged, or its members are not the sizes it declares."""

    code = "import_corrupt"


class UnsafeMember(ImportRefused):
    """The zip holds a member that may not be extracted."""

    code = "import_unsafe_member"


class ImportTooLarge(ImportRefused):
    """The import is larger than allowed."""

    code = "import_too_large"


class ZipBomb(ImportRefused):
    """A member expands far more than real data does."""

    code = "import_zip_bomb"


class BadManifest(ImportRefused):
    """manifest.json is not a readable Odoo manifest."""

    code = "import_bad_manifest"


class VersionMismatch(ImportRefused):
    """The backup is of another major ERP version than the environment's."""

    code = "import_version_mismatch"


class MissingDump(ImportRefused):
    """The zip has no dump.sql."""

    code = "import_missing_dump"


class NotADump(ImportRefused):
    """dump.sql is not pg_dump's plain output."""

    code = "import_not_a_dump"


# -- writing ------------------------------------------------------------------

def write_odoo_zip(out, dump_sql_chunks, filestore_tar, manifest, prefix="", level=6):
    """Write Odoo's backup zip to `out` (anything with .write; it need not seek:
    members then carry data descriptors). `dump_sql_chunks`: an iterator of bytes
    (pg_dump's plain output); `filestore_tar`: a readable plain-tar stream or None,
    whose regular files under `prefix` go under filestore/ (anything else is
    skipped and counted); `manifest`: {db_name, version, pg_version, modules}."""
    summary = {"dump_size": 0, "files": 0, "filestore_size": 0, "skipped": 0}
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        with zf.open(_info(DUMP, time.time(), level), "w", force_zip64=True) as dst:
            for chunk in dump_sql_chunks:
                dst.write(chunk)
                summary["dump_size"] += len(chunk)
        if filestore_tar is not None:
            _copy_tar(zf, filestore_tar, prefix, summary, level)
        body = json.dumps(odoo_manifest(manifest), indent=4).encode()
        zf.writestr(_info(MANIFEST, time.time(), level), body)
    return summary


def odoo_manifest(manifest):
    """Odoo's manifest.json fields from Berth's manifest."""
    version = str(manifest.get("version") or manifest.get("erp_version") or "")
    parts = version.split(".")
    head = [int(p) if p.isdigit() else p for p in parts[:2]]
    return {
        "odoo_dump": "1",
        "db_name": manifest.get("db_name") or "odoo",
        "version": version,
        "version_info": head + [0] * (2 - len(head)) + [0, "final", 0, ""],
        "major_version": ".".join(parts[:2]),
        "pg_version": str(manifest.get("pg_version") or ""),
        "modules": dict(manifest.get("modules") or {}),
    }


def _info(name, mtime, level, size=None):
    info = zipfile.ZipInfo(name, time.localtime(max(mtime, 315532800))[:6])  # zip: >= 1980
    info.compress_type = zipfile.ZIP_DEFLATED
    _set_level(info, level)
    info.external_attr = (stat.S_IFREG | 0o644) << 16
    if size is not None:
        info.file_size = size  # lets zipfile choose zip64 for large files only
    return info


def _set_level(info, level):
    info._compresslevel = level  # no public setter before Python 3.13 (compress_level)


def _copy_tar(zf, fileobj, prefix, summary, level):
    with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
        while (member := tar.next()) is not None:
            tar.members.clear()  # a streamed tar otherwise keeps every header
            name = member.name.removeprefix("./")
            if member.isdir() or not name.startswith(prefix):
                continue
            rel = name[len(prefix):]
            if not member.isfile() or _unsafe_parts(rel):
                summary["skipped"] += 1  # links and devices have no place in Odoo's format
                continue
            src = tar.extractfile(member)
            first = src.read(CHUNK)
            info = _info(FILESTORE + rel, member.mtime, level, member.size)
            sample = first[:64 * KiB]
            if sample and len(zlib.compress(sample, 1)) > 0.95 * len(sample):
                # Already compressed (images, PDFs): the fastest level. Still deflated, not
                # stored: a stored member with a data descriptor defeats streaming readers.
                _set_level(info, 1)
            with zf.open(info, "w") as dst:
                while first:
                    dst.write(first)
                    first = src.read(CHUNK)
            summary["files"] += 1
            summary["filestore_size"] += member.size


# -- reading an import --------------------------------------------------------

def inspect_import(source, expected_major_version, limits=DEFAULT_LIMITS):
    """What an upload is, or ImportRefused. `source`: a path or a seekable binary
    file (a RangeFile over the uploaded object). A zip's members are checked from
    its central directory, its manifest and the head of its dump.sql read."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return inspect_import(f, expected_major_version, limits)
    source.seek(0)
    head = source.read(64)
    source.seek(0)
    if head.startswith(CUSTOM_MAGIC):
        return {"kind": "dump", "size": _size(source)}
    if _plain(head):
        return {"kind": "sql", "size": _size(source)}
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise UnrecognisedImport()
    zf = open_zip(source, limits)
    infos = {i.filename: i for i in zf.infolist()}
    if DUMP not in infos:
        raise MissingDump()
    with zf.open(infos[DUMP]) as f:
        if not _plain(_read_checked(f, 64)):
            raise NotADump()
    manifest = _manifest(zf, infos.get(MANIFEST), limits)
    found = _major(manifest)
    if expected_major_version and found and found != _major({"major_version": expected_major_version}):
        raise VersionMismatch(f"the backup is of version {found}, "
                              f"the environment runs {expected_major_version}")
    files = [i for i in infos.values() if i.filename.startswith(FILESTORE) and not i.is_dir()]
    return {"kind": "zip", "manifest": manifest, "major_version": found,
            "dump_size": infos[DUMP].file_size, "files": len(files),
            "filestore_size": sum(i.file_size for i in files)}


def open_zip(fileobj, limits=DEFAULT_LIMITS):
    """A ZipFile over `fileobj` whose every member passed `check_members`."""
    entries, size, start = _directory(fileobj)
    if entries > limits.max_members:
        raise ImportTooLarge(f"{entries} members, at most {limits.max_members} allowed")
    if size > limits.max_directory:
        raise ImportTooLarge("the zip's central directory is too large")
    try:
        zf = zipfile.ZipFile(fileobj)
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise CorruptImport(f"unreadable zip: {exc}") from exc
    check_members(zf, limits, start)
    return zf


def check_members(zf, limits=DEFAULT_LIMITS, directory_start=None):
    """Refuse unsafe names and member types, duplicates, and declared sizes over
    the limits; with `directory_start`, members whose data overlap (a way to
    make a small zip expand to many times its size)."""
    infos, names, total = zf.infolist(), set(), 0
    if len(infos) > limits.max_members:
        raise ImportTooLarge(f"{len(infos)} members, at most {limits.max_members} allowed")
    for info in infos:
        name = info.orig_filename
        if name in names:
            raise UnsafeMember(f"member {name!r} appears twice")
        names.add(name)
        _check_name(name)
        kind = stat.S_IFMT(info.external_attr >> 16) if info.create_system == 3 else 0
        if kind == stat.S_IFLNK:
            raise UnsafeMember(f"member {name!r} is a symbolic link")
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise UnsafeMember(f"member {name!r} is not a regular file")
        if info.flag_bits & 0x1:
            raise UnsafeMember(f"member {name!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED,
                                      zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
            raise CorruptImport(f"member {name!r} uses an unsupported compression")
        _check_ratio(name, info.file_size, info.compress_size, limits)
        total += info.file_size
        if total > limits.max_total:
            raise ImportTooLarge(f"the import expands to more than {limits.max_total} bytes")
    if directory_start is not None:
        ordered = sorted(infos, key=lambda i: i.header_offset)
        for info, after in zip(ordered, ordered[1:] + [None], strict=True):
            encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
            end = (info.header_offset + 30 + len(info.orig_filename.encode(encoding, "replace"))
                   + info.compress_size)
            if end > (after.header_offset if after else directory_start):
                raise ZipBomb(f"member {info.orig_filename!r} overlaps the next one")


def iter_member(zf, name, limits=DEFAULT_LIMITS, chunk=CHUNK):
    """A member's bytes in chunks (dump.sql piped into psql), with its size and
    expansion enforced on the bytes themselves."""
    yield from _stream(zf, zf.getinfo(name), limits, [0], chunk)


def extract_filestore(zf, dest_dir, uid=None, gid=None, limits=DEFAULT_LIMITS):
    """Extract the filestore/ members into `dest_dir` (created here; it must not
    exist), owned by uid:gid when given. On any error `dest_dir` is removed, so
    nothing of a refused import stays on disk."""
    check_members(zf, limits)
    os.mkdir(dest_dir, 0o755)
    summary, total = {"files": 0, "bytes": 0}, [0]
    try:
        _own(dest_dir, uid, gid)
        for info in zf.infolist():
            if not info.orig_filename.startswith(FILESTORE):
                continue
            parts = info.orig_filename[len(FILESTORE):].rstrip("/").split("/")
            if parts == [""]:
                continue
            here = dest_dir
            for part in parts[:-1] if not info.is_dir() else parts:
                here = os.path.join(here, part)
                if not os.path.isdir(here):
                    _mkdir(here, uid, gid)
            if info.is_dir():
                continue
            fd = os.open(os.path.join(here, parts[-1]),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as out:
                if uid is not None:
                    os.fchown(fd, uid, gid)
                for data in _stream(zf, info, limits, total):
                    out.write(data)
            summary["files"] += 1
        summary["bytes"] = total[0]
        return summary
    except BaseException as exc:
        shutil.rmtree(dest_dir, ignore_errors=True)
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            raise UnsafeMember(f"the filestore's members clash: {exc}") from exc
        raise


# -- helpers ------------------------------------------------------------------

def _stream(zf, info, limits, total, chunk=CHUNK):
    """`info`'s bytes, counted: never more than declared, within the total and
    the expansion bound (`total` is a one-item list shared across members)."""
    written = 0
    try:
        with zf.open(info) as src:
            while data := src.read(chunk):
                written += len(data)
                total[0] += len(data)
                if written > info.file_size:
                    raise CorruptImport(f"member {info.filename!r} is larger than it declares")
                if total[0] > limits.max_total:
                    raise ImportTooLarge(f"the import expands to more than {limits.max_total} bytes")
                _check_ratio(info.filename, written, info.compress_size, limits)
                yield data
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
        raise CorruptImport(f"member {info.filename!r} is damaged: {exc}") from exc
    if written != info.file_size:
        raise CorruptImport(f"member {info.filename!r} is shorter than it declares")


def _check_ratio(name, size, compressed, limits):
    if size > limits.ratio_floor and size > limits.max_ratio * max(compressed, 1):
        raise ZipBomb(f"member {name!r} expands more than {limits.max_ratio}:1")


def _check_name(name):
    if ("\\" in name or name.startswith("/") or re.match(r"[A-Za-z]:", name)
            or _unsafe_parts(name.removesuffix("/"))):
        raise UnsafeMember(f"member name {name!r} is not a safe relative path")
    if name not in (DUMP, MANIFEST, FILESTORE) and not name.startswith(FILESTORE):
        raise UnsafeMember(f"member {name!r} is not part of an Odoo backup")


def _unsafe_parts(rel):
    return any(part in ("", ".", "..") or "\0" in part for part in rel.split("/"))


def _own(path, uid, gid):
    if uid is not None:
        os.chown(path, uid, gid, follow_symlinks=False)


def _mkdir(path, uid, gid):
    os.mkdir(path, 0o755)
    _own(path, uid, gid)


def _plain(head):
    return head.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").startswith(PLAIN_HEADER)


def _size(f):
    end = f.seek(0, 2)
    f.seek(0)
    return end


def _read_checked(f, n):
    try:
        return f.read(n)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise CorruptImport(f"unreadable member: {exc}") from exc


def _manifest(zf, info, limits):
    if info is None:
        return None  # Odoo restores zips without one; the version is then unknown
    if info.file_size > limits.max_manifest:
        raise ImportTooLarge("manifest.json is too large")
    with zf.open(info) as f:
        raw = _read_checked(f, limits.max_manifest + 1)
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise BadManifest(f"manifest.json is not JSON: {exc}") from exc
    if not isinstance(manifest, dict) or str(manifest.get("odoo_dump", "1")) != "1":
        raise BadManifest()
    return manifest


def _major(manifest):
    """"17.0" from major_version, version_info or version (None when absent)."""
    if not manifest:
        return None
    if manifest.get("major_version"):
        text = str(manifest["major_version"])
    elif isinstance(manifest.get("version_info"), list) and len(manifest["version_info"]) >= 2:
        text = ".".join(str(p) for p in manifest["version_info"][:2])
    else:
        text = str(manifest.get("version") or "")
    match = re.match(r"(saas~)?\d+(\.\d+)?", text.strip())
    if not match:
        return None
    return match.group(0) if match.group(2) else match.group(0) + ".0"


def _directory(f):
    """(entries, size, start) of the central directory, read from the end
    records before zipfile loads the directory whole."""
    end = f.seek(0, 2)
    tail_len = min(end, 22 + 65535)
    f.seek(end - tail_len)
    tail = f.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise CorruptImport("not a zip archive: no end record")
    entries, size = struct.unpack("<HI", tail[at + 10:at + 16])
    eocd = end - tail_len + at
    if tail[max(at - 20, 0):at].startswith(b"PK\x06\x07"):  # zip64 end record before the locator
        f.seek(eocd - 76)
        record = f.read(56)
        if not record.startswith(b"PK\x06\x06"):
            raise CorruptImport("not a zip archive: broken zip64 end record")
        entries, size = struct.unpack("<QQ", record[32:48])
        return entries, size, eocd - 76 - size
    return entries, size, eocd - size
