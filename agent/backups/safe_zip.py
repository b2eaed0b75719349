"""Reading untrusted zips safely: names, member types and declared sizes are
checked from the central directory before anything is extracted, and the sizes
again on the bytes themselves while they are streamed, because declared sizes
can lie. Memory stays bounded: members are streamed in chunks."""

import os
import re
import shutil
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass

from agent.errors import AgentError
from protocol.errors import AgentErrorCode

MiB, GiB = 1 << 20, 1 << 30
CHUNK = MiB


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

    code = AgentErrorCode.IMPORT_REFUSED


class CorruptImport(ImportRefused):
    """The zip is damaged, or its members are not the sizes it declares."""

    code = AgentErrorCode.IMPORT_CORRUPT


class UnsafeMember(ImportRefused):
    """The zip holds a member that may not be extracted."""

    code = AgentErrorCode.IMPORT_UNSAFE_MEMBER


class ImportTooLarge(ImportRefused):
    """The import is larger than allowed."""

    code = AgentErrorCode.IMPORT_TOO_LARGE


class ZipBomb(ImportRefused):
    """A member expands far more than real data does."""

    code = AgentErrorCode.IMPORT_ZIP_BOMB


def open_zip(fileobj, limits=DEFAULT_LIMITS, allowed=None):
    """A ZipFile over `fileobj` whose every member passed `check_members`; its
    size is checked from the end records before zipfile loads the directory."""
    entries, size, start = _directory(fileobj)
    if entries > limits.max_members:
        raise ImportTooLarge(f"{entries} members, at most {limits.max_members} allowed")
    if size > limits.max_directory:
        raise ImportTooLarge("the zip's central directory is too large")
    try:
        zf = zipfile.ZipFile(fileobj)
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise CorruptImport(f"unreadable zip: {exc}") from exc
    try:
        check_members(zf, limits, allowed, start)
    except BaseException:
        zf.close()
        raise
    return zf


def check_members(zf, limits=DEFAULT_LIMITS, allowed=None, directory_start=None):
    """Refuse unsafe names, names `allowed(name)` refuses, member types other than
    files and directories, duplicates, and declared sizes over the limits; with
    `directory_start`, members whose data overlap (a way to make a small zip
    expand to many times its size)."""
    infos, names, total = zf.infolist(), set(), 0
    if len(infos) > limits.max_members:
        raise ImportTooLarge(f"{len(infos)} members, at most {limits.max_members} allowed")
    for info in infos:
        name = info.orig_filename
        if name in names:
            raise UnsafeMember(f"member {name!r} appears twice")
        names.add(name)
        _check_name(name)
        if allowed and not allowed(name):
            raise UnsafeMember(f"member {name!r} has no place in this archive")
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
    """A member's bytes in chunks, with its size and expansion enforced on the
    bytes themselves."""
    yield from stream(zf, zf.getinfo(name), limits, [0], chunk)


def extract_tree(zf, prefix, dest_dir, uid=None, gid=None, limits=DEFAULT_LIMITS, allowed=None):
    """Extract the members under `prefix` ("dir/") into `dest_dir` (created here;
    it must not exist, so no link of someone else's is ever followed), owned by
    uid:gid when given. On any error `dest_dir` is removed: nothing of a refused
    archive stays on disk."""
    check_members(zf, limits, allowed)
    os.mkdir(dest_dir, 0o755)
    summary, total = {"files": 0, "bytes": 0}, [0]
    try:
        _own(dest_dir, uid, gid)
        for info in zf.infolist():
            if not info.orig_filename.startswith(prefix):
                continue
            parts = info.orig_filename[len(prefix):].rstrip("/").split("/")
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
                for data in stream(zf, info, limits, total):
                    out.write(data)
            summary["files"] += 1
        summary["bytes"] = total[0]
        return summary
    except BaseException as exc:
        shutil.rmtree(dest_dir, ignore_errors=True)
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            raise UnsafeMember(f"the archive's members clash: {exc}") from exc
        raise


def stream(zf, info, limits, total, chunk=CHUNK):
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
            or unsafe_parts(name.removesuffix("/"))):
        raise UnsafeMember(f"member name {name!r} is not a safe relative path")


def unsafe_parts(rel):
    """Whether a relative name has empty, `.` or `..` parts (or NULs)."""
    return any(part in ("", ".", "..") or "\0" in part for part in rel.split("/"))


def _own(path, uid, gid):
    if uid is not None:
        os.chown(path, uid, gid, follow_symlinks=False)


def _mkdir(path, uid, gid):
    os.mkdir(path, 0o755)
    _own(path, uid, gid)


def read_checked(f, n):
    """f.read(n), damage reported as CorruptImport."""
    try:
        return f.read(n)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise CorruptImport(f"unreadable member: {exc}") from exc


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
