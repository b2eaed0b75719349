"""A read-only, seekable file over HTTP Range requests, so that zipfile can read
a zip kept in storage (its central directory is at the end) without
downloading it whole. One block is buffered at a time.

The URLs are the signed GET URLs of the storage contract (local or S3
presigned): signed for GET only, so the size is learnt from a ranged GET
(`Content-Range: bytes a-b/SIZE`), never from a HEAD."""

import io
import re
import time
import urllib.error
import urllib.request

from agent.errors import AgentError
from protocol.errors import AgentErrorCode

MiB = 1 << 20
_CONTENT_RANGE = re.compile(r"bytes (?:(\d+)-(\d+)|\*)/(\d+)")


class DownloadFailed(AgentError):
    """A stored object could not be read."""

    code = AgentErrorCode.DOWNLOAD_FAILED


class RangeFile(io.RawIOBase):
    def __init__(self, url, size=None, block=MiB, timeout=60, attempts=3):
        super().__init__()
        self.url, self.block, self.timeout, self.attempts = url, block, timeout, attempts
        self._pos = 0
        self._buf_start, self._buf = 0, b""
        # The last block first: it tells the size and holds the zip's end records.
        self._size = size if size is not None else self._learn_size()

    # -- the io interface zipfile uses ---------------------------------------
    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise OSError("negative seek position")
        self._pos = base + offset
        return self._pos

    @property
    def size(self):
        return self._size

    def readinto(self, b):
        view = memoryview(b).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:
            off = self._pos - self._buf_start
            if not 0 <= off < len(self._buf):
                self._buf_start, off = self._pos, 0
                self._buf = self._get(self._pos, min(self._pos + self.block, self._size) - 1)
            n = min(len(view) - done, len(self._buf) - off)
            view[done:done + n] = self._buf[off:off + n]
            done += n
            self._pos += n
        return done

    def close(self):
        self._buf = b""
        super().close()

    # -- HTTP -------------------------------------------------------------------
    def _learn_size(self):
        """A suffix range: the answer's Content-Range gives the size, and its body
        (the last block) is kept."""
        with self._open(f"bytes=-{self.block}") as resp:
            if resp.status == 200:  # the server ignores Range: fine only if small
                body = resp.read(self.block + 1)
                if len(body) > self.block:
                    raise DownloadFailed("the storage server does not support range requests")
                self._buf_start, self._buf = 0, body
                return len(body)
            first, _, total = self._content_range(resp)
            self._buf_start, self._buf = first, self._read_exactly(resp, total - first)
            return total

    def _get(self, first, last):
        want = last - first + 1
        for attempt in range(self.attempts):
            try:
                with self._open(f"bytes={first}-{last}") as resp:
                    if resp.status != 206 or self._content_range(resp)[0] != first:
                        raise DownloadFailed(f"unexpected answer {resp.status} to a range request")
                    return self._read_exactly(resp, want)
            except (OSError, DownloadFailed) as exc:
                if attempt + 1 == self.attempts or getattr(exc, "final", False):
                    raise DownloadFailed(f"reading bytes {first}-{last} failed: {exc}") from exc
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def _open(self, byte_range):
        request = urllib.request.Request(self.url, headers={"Range": byte_range})
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 416:  # an empty object has no last block
                match = _CONTENT_RANGE.fullmatch(exc.headers.get("Content-Range", ""))
                if match and match.group(3) == "0":
                    return _Empty()
            failed = DownloadFailed(f"the storage server answered {exc.code}")
            failed.final = exc.code < 500  # an expired or refused URL stays so
            raise failed from exc
        except OSError as exc:
            raise DownloadFailed(f"the storage server could not be reached: {exc}") from exc

    @staticmethod
    def _content_range(resp):
        match = _CONTENT_RANGE.fullmatch(resp.headers.get("Content-Range", "").strip())
        if not match or match.group(1) is None:
            raise DownloadFailed("a range answer without a usable Content-Range")
        return int(match.group(1)), int(match.group(2)), int(match.group(3))

    @staticmethod
    def _read_exactly(resp, n):
        body = resp.read(n)
        if len(body) != n:
            raise DownloadFailed(f"short read: {len(body)} of {n} bytes")
        return body


class _Empty:
    """The answer standing for an empty object (416 with `bytes */0`)."""

    status = 206
    headers = {"Content-Range": "bytes 0-0/0"}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self, n=-1):
        return b""
