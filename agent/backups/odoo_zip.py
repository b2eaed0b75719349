"""Odoo's own backup format, both ways: the zip its database manager and
Odoo.sh produce and accept (`dump.sql`: plain pg_dump; `filestore/`: the
database's filestore directory; `manifest.json`), written as a stream, and
imports (such a zip, or a bare custom-format or plain dump) checked before
anything of them reaches a database or a disk.

The checks that make reading an untrusted zip safe are in `safe_zip`; this
module adds Odoo's rules (which members, what dump.sql and manifest.json hold)."""

import json
import os
import re
import stat
import tarfile
import time
import zipfile
import zlib

from agent.backups import safe_zip
from agent.backups.range_file import DownloadFailed, RangeFile  # noqa: F401  (part of this API)
from agent.backups.safe_zip import (  # noqa: F401  (part of this API)
    CHUNK,
    DEFAULT_LIMITS,
    CorruptImport,
    ImportRefused,
    ImportTooLarge,
    Limits,
    UnsafeMember,
    ZipBomb,
    iter_member,
    read_checked,
    unsafe_parts,
)
from protocol.errors import AgentErrorCode

KiB = 1 << 10
DUMP, MANIFEST, FILESTORE = "dump.sql", "manifest.json", "filestore/"
PLAIN_HEADER = b"--\n-- PostgreSQL database dump"
CUSTOM_MAGIC = b"PGDMP"


class UnrecognisedImport(ImportRefused):
    """Neither an Odoo backup zip, nor a custom-format dump, nor pg_dump's plain output."""

    code = AgentErrorCode.IMPORT_UNRECOGNISED


class BadManifest(ImportRefused):
    """manifest.json is not a readable Odoo manifest."""

    code = AgentErrorCode.IMPORT_BAD_MANIFEST


class VersionMismatch(ImportRefused):
    """The backup is of another major ERP version than the environment's."""

    code = AgentErrorCode.IMPORT_VERSION_MISMATCH


class MissingDump(ImportRefused):
    """The zip has no dump.sql."""

    code = AgentErrorCode.IMPORT_MISSING_DUMP


class NotADump(ImportRefused):
    """dump.sql is not pg_dump's plain output."""

    code = AgentErrorCode.IMPORT_NOT_A_DUMP


# -- writing ------------------------------------------------------------------

def write_odoo_zip(out, dump_sql_chunks, filestore_tar, manifest, prefix="", level=6):
    """Write Odoo's backup zip to `out` (anything with .write; it is never sought:
    members carry data descriptors). `dump_sql_chunks`: an iterator of bytes
    (pg_dump's plain output); `filestore_tar`: a readable plain-tar stream or None,
    whose regular files under `prefix` go under filestore/ (anything else is
    skipped and counted); `manifest`: {db_name, version, pg_version, modules}.

    A source that fails must raise (the dump iterator at its end if its process
    failed, the tar stream's read at EOF): the archive is then cut short,
    without the central directory that would make a partial export look whole."""
    summary = {"dump_size": 0, "files": 0, "filestore_size": 0, "skipped": 0}
    sink = _Sink(out)
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        try:
            with zf.open(_info(DUMP, time.time(), level), "w", force_zip64=True) as dst:
                for chunk in dump_sql_chunks:
                    dst.write(chunk)
                    summary["dump_size"] += len(chunk)
            if filestore_tar is not None:
                _copy_tar(zf, filestore_tar, prefix, summary, level)
            body = json.dumps(odoo_manifest(manifest), indent=4).encode()
            zf.writestr(_info(MANIFEST, time.time(), level), body)
        except BaseException:
            sink.cut = True
            raise
    return summary


class _Sink:
    """`out`, cut off after a failure: zipfile still finishes the member and the
    archive on its way out, and those bytes must go nowhere. (No tell(): zipfile
    then writes as to a pipe, whatever `out` is.)"""

    def __init__(self, out):
        self.out, self.cut = out, False

    def write(self, data):
        return len(data) if self.cut else self.out.write(data)

    def flush(self):
        if not self.cut and hasattr(self.out, "flush"):
            self.out.flush()


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
            if not member.isfile() or unsafe_parts(rel):
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

def odoo_member(name):
    """Whether a member has a place in Odoo's zip (unexpected ones are refused)."""
    return name in (DUMP, MANIFEST, FILESTORE) or name.startswith(FILESTORE)


def open_zip(fileobj, limits=DEFAULT_LIMITS):
    """A ZipFile over an Odoo backup zip whose every member passed the checks."""
    return safe_zip.open_zip(fileobj, limits, odoo_member)


def extract_filestore(zf, dest_dir, uid=None, gid=None, limits=DEFAULT_LIMITS):
    """filestore/ extracted into `dest_dir`, which must not exist yet (see
    safe_zip.extract_tree: removed again on any error)."""
    return safe_zip.extract_tree(zf, FILESTORE, dest_dir, uid, gid, limits, odoo_member)


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
    with open_zip(source, limits) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        if DUMP not in infos:
            raise MissingDump()
        with zf.open(infos[DUMP]) as f:
            if not _plain(read_checked(f, 64)):
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


# -- helpers ------------------------------------------------------------------

def _plain(head):
    return head.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").startswith(PLAIN_HEADER)


def _size(f):
    end = f.seek(0, 2)
    f.seek(0)
    return end


def _manifest(zf, info, limits):
    if info is None:
        return None  # Odoo restores zips without one; the version is then unknown
    if info.file_size > limits.max_manifest:
        raise ImportTooLarge("manifest.json is too large")
    with zf.open(info) as f:
        raw = read_checked(f, limits.max_manifest + 1)
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

