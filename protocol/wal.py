"""Continuous archiving of an environment's PostgreSQL write-ahead log, as the
agent ships it and the control plane keeps it.

PostgreSQL's `archive_command` copies each finished WAL file into a spool
folder the agent watches (SPOOL, a folder of the environment's on the server);
the agent compresses each one and uploads it as `<name>.zst` (`.gz` from a
server without zstd) through the control plane's WAL transfer API, which reads
it back, checks it and records it. `archive_timeout` bounds how long written
WAL waits for its file to finish: ARCHIVE_TIMEOUT seconds."""

import re

SPOOL = "/var/lib/berth/wal"  # the spool folder as the database container sees it
ARCHIVE_TIMEOUT = 30  # seconds: PostgreSQL switches to a new WAL file at least this often
BASE_OBJECT = "base.tar.zst"  # a backup's physical copy of the cluster, for the WAL
POSTGRES_UID = 999  # the official postgres image's user, who writes the spool
# A segment (timeline, log, segment), a timeline's history, a base backup's label.
FILE_NAME = re.compile(r"[0-9A-F]{24}|[0-9A-F]{8}\.history|[0-9A-F]{24}\.[0-9A-F]{8}\.backup")
OBJECT_NAME = re.compile(rf"(?:{FILE_NAME.pattern})\.(?:zst|gz)")
# A filestore file that appeared since the last backup, archived beside the WAL so
# that the filestore at any moment of the window can be put together (by content).
FILESTORE_OBJECT = re.compile(r"files/[0-9a-f]{64}\.(?:zst|gz)")
FILESTORE_DIR = "filestore/"  # the ERP's attachments, in its data directory


def is_file_name(name):
    return isinstance(name, str) and FILE_NAME.fullmatch(name) is not None


def is_object_name(name):
    return isinstance(name, str) and OBJECT_NAME.fullmatch(name) is not None


def is_filestore_object(name):
    return isinstance(name, str) and FILESTORE_OBJECT.fullmatch(name) is not None


def segment_of_lsn(timeline, lsn):
    """The segment file that holds `lsn` ("16/B374D848", as PostgreSQL writes one)."""
    high, _, low = lsn.partition("/")
    return segment_name(timeline, ((int(high, 16) << 32) | int(low, 16)) // SEGMENT_BYTES)


SEGMENT_BYTES = 16 * 1024 * 1024  # PostgreSQL's default
SEGMENTS_PER_LOG = 0x100000000 // SEGMENT_BYTES


def segment_number(name):
    """(timeline, number) of a segment's file name; None for another WAL file."""
    if not (isinstance(name, str) and len(name) == 24 and FILE_NAME.fullmatch(name)):
        return None
    return int(name[:8], 16), int(name[8:16], 16) * SEGMENTS_PER_LOG + int(name[16:], 16)


def timeline_of(name):
    """The timeline of a segment's or a history file's name; None for another."""
    if segment_number(name) or (isinstance(name, str) and HISTORY.fullmatch(name)):
        return int(name[:8], 16)
    return None


HISTORY = re.compile(r"[0-9A-F]{8}\.history")


def segment_name(timeline, number):
    log, seg = divmod(number, SEGMENTS_PER_LOG)
    return f"{timeline:08X}{log:08X}{seg:08X}"


def settings(timeout=ARCHIVE_TIMEOUT):
    """PostgreSQL's settings for archiving into SPOOL. The copy goes through a
    temporary name, so the agent never ships half a file; a file copied again
    (PostgreSQL retries after a crash) has the same content."""
    copy = (f"cp %p {SPOOL}/%f.tmp && mv {SPOOL}/%f.tmp {SPOOL}/%f")
    return [("wal_level", "replica"), ("archive_mode", "on"),
            ("archive_timeout", str(int(timeout))), ("archive_command", copy)]
