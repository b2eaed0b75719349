"""The filestore as one compressed tar stream, both ways, through `tar` and
`zstd` (or `gzip` where zstd is missing) subprocesses: the agent only moves
bounded chunks between them and the network."""

import contextlib
import fcntl
import os
import shutil
import subprocess
import threading

from agent.errors import AgentError
from protocol.errors import AgentErrorCode

CHUNK = 1024 * 1024
# The pipes between the agent, the compressor and tar hold this much, not Linux's
# 64 KiB: each side wakes the other a sixteenth as often. Best effort: past
# /proc/sys/fs/pipe-max-size or a user's pipe quota, a pipe keeps its default.
PIPE_SIZE = 1024 * 1024
# tar reads an archive in records of 2,048 blocks (1 MiB), not its default 20 (10 KiB):
# a hundredth of the reads from the pipe, and each file written in pieces of up to
# a record (GNU tar reblocks a pipe's short reads: -B is implied on standard input).
# With the wider pipes, zstd and tar spent 30 % less CPU. Only for reading: an archive
# written so would be padded to 1 MiB, and an older agent's tar, which stops reading
# at the archive's end mark, would leave its decompressor a closed pipe (a failure).
READ_RECORD = ["-b", "2048"]
SUFFIX = {"zstd": ".tar.zst", "gzip": ".tar.gz"}


class ArchiveError(AgentError):
    code = AgentErrorCode.ARCHIVE_FAILED


def compression():
    """The compressor this server has: zstd when installed, else gzip."""
    return "zstd" if shutil.which("zstd") else "gzip"


def _compressor(kind, decompress=False):
    if kind == "zstd":
        return ["zstd", "-d", "-q", "-c"] if decompress else ["zstd", "-T0", "-3", "-q", "-c"]
    if kind == "gzip":
        return ["gzip", "-d", "-c"] if decompress else ["gzip", "-c"]
    raise ArchiveError(f"unknown compression {kind!r}")


class _Tail:
    """A process's error output drained on a thread (a full pipe would stall
    it), of which the last few lines are kept for a failure message."""

    def __init__(self, stream, keep=2000):
        self.text = b""

        def drain():
            for line in stream:
                self.text = (self.text + line)[-keep:]
            stream.close()
        self.thread = threading.Thread(target=drain, name="berth-stderr", daemon=True)
        self.thread.start()

    def __str__(self):
        self.thread.join(5)
        return self.text.decode(errors="replace").strip()


def _spawn(cmd, **kwargs):
    try:
        return subprocess.Popen(cmd, stderr=subprocess.PIPE, **kwargs)
    except FileNotFoundError as exc:
        raise ArchiveError(f"{cmd[0]} is not installed on this server") from exc


def _widen(*pipes):
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    if setsize is None:
        return
    for pipe in pipes:
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe.fileno(), setsize, PIPE_SIZE)


def raw_size(path):
    """The bytes of the regular files under `path` (what the archive holds)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if not os.path.islink(os.path.join(root, name)):
                total += st.st_size
    return total


def pack(path, kind):
    """The compressed tar stream of the directory `path`, chunk by chunk."""
    tar = _spawn(["tar", "-C", str(path), "--numeric-owner", "-cf", "-", "."],
                 stdout=subprocess.PIPE)
    tar_err = _Tail(tar.stderr)
    comp = _spawn(_compressor(kind), stdin=tar.stdout, stdout=subprocess.PIPE)
    comp_err = _Tail(comp.stderr)
    _widen(tar.stdout, comp.stdout)
    tar.stdout.close()  # the compressor's now: it sees the end when tar exits
    finished = False
    try:
        while data := comp.stdout.read(CHUNK):
            yield data
        finished = True
    finally:
        comp.stdout.close()
        if not finished:  # the consumer gave up: so do they
            comp.kill()
            tar.kill()
        comp.wait()
        tar.wait()
    # tar's 1: a file changed while it was read (the ERP keeps writing); the copy is
    # still whole, as consistent as a live filestore can be.
    if tar.returncode not in (0, 1):
        raise ArchiveError(f"tar of the filestore failed (exit code {tar.returncode}): {tar_err}")
    if comp.returncode != 0:
        raise ArchiveError(f"{kind} failed (exit code {comp.returncode}): {comp_err}")


def unpack(chunks, kind, target, finished=None):
    """Extract a compressed tar stream into the existing directory `target`.
    `finished(name)`, if given, is called on a thread with each member tar has
    moved past (as its verbose listing names it, relative to `target`)."""
    comp = _spawn(_compressor(kind, decompress=True), stdin=subprocess.PIPE,
                  stdout=subprocess.PIPE)
    comp_err = _Tail(comp.stderr)
    _widen(comp.stdin, comp.stdout)
    tar = _spawn(["tar", "-C", str(target), "--numeric-owner", *(["-v"] if finished else []),
                  *READ_RECORD, "-xf", "-"], stdin=comp.stdout,
                 stdout=subprocess.PIPE if finished else subprocess.DEVNULL)
    tar_err = _Tail(tar.stderr)
    listing = _Listing(tar.stdout, finished) if finished else None
    comp.stdout.close()
    try:
        for chunk in chunks:
            comp.stdin.write(chunk)
    except BrokenPipeError:
        pass  # the decompressor or tar gave up; their exit codes say why
    except BaseException:
        comp.kill()
        tar.kill()
        raise
    finally:
        try:
            comp.stdin.close()
        except BrokenPipeError:
            pass
        comp.wait()
        tar.wait()
        if listing is not None:
            listing.thread.join()
    if comp.returncode != 0:
        raise ArchiveError(f"the filestore archive could not be decompressed "
                           f"({kind}, exit code {comp.returncode}): {comp_err}")
    if tar.returncode != 0:
        raise ArchiveError(f"the filestore archive could not be extracted "
                           f"(exit code {tar.returncode}): {tar_err}")


class _Listing:
    """tar's verbose listing read on a thread: a member's name is printed as tar
    starts it, so the one before is finished; the last is at the end."""

    def __init__(self, stream, finished):
        def follow():
            previous = None
            with stream:
                for line in stream:
                    if previous is not None:
                        finished(previous)
                    previous = line.rstrip(b"\n")
            if previous is not None:
                finished(previous)
        self.thread = threading.Thread(target=follow, name="berth-tar-listing", daemon=True)
        self.thread.start()


class Decompressed:
    """A readable plain-tar stream of a compressed archive's chunks: a decompressor
    fed on a thread, started by the first read (an export reads it after the dump:
    the download would otherwise wait on a full pipe that long). Read to its end,
    it raises `error` if the archive or its download failed."""

    def __init__(self, chunks, kind, error=ArchiveError):
        self.chunks, self.kind, self.proc, self.failed = chunks, kind, None, []
        self.error = error

    def _start(self):
        self.proc = _spawn(_compressor(self.kind, decompress=True),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _widen(self.proc.stdin, self.proc.stdout)
        self.err = _Tail(self.proc.stderr)
        self.feeder = threading.Thread(target=self._feed, name="berth-decompress", daemon=True)
        self.feeder.start()

    def _feed(self):
        try:
            for chunk in self.chunks:
                self.proc.stdin.write(chunk)
        except BrokenPipeError:
            pass
        except BaseException as exc:  # noqa: BLE001  (raised on the reading side)
            self.failed.append(exc)
        with contextlib.suppress(OSError):
            self.proc.stdin.close()

    def read(self, n=-1):
        if self.proc is None:
            self._start()
        data = self.proc.stdout.read(n)
        if not data and n != 0:
            if self.proc.wait() != 0:
                raise self.error(f"the filestore archive could not be decompressed "
                                 f"({self.kind}): {self.err}")
            if self.failed:
                raise self.error(f"reading the filestore archive failed: {self.failed[0]}")
        return data

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.stdout.close()
            self.proc.wait()
            self.feeder.join(30)
