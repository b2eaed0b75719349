"""The control plane's transfer API, from the agent's side: objects of one
backup go up as parts of at most PART_SIZE to URLs the control plane hands out
(presigned S3 part uploads, or signed URLs on the control plane itself), and
come back down from a download URL. The agent never holds storage credentials;
only the transfer API itself sees its own (`Authorization: Bearer`)."""

import hashlib
import json
import queue
import threading
import time
import urllib.error
import urllib.request

from agent.errors import AgentError
from protocol.errors import AgentErrorCode

# A part: S3 takes no smaller one but the last (5 MiB). Two are held in memory while
# an object goes up (one filling while the other is PUT).
PART_SIZE = 6 * 1024 * 1024
READ_SIZE = 1024 * 1024
TIMEOUT = 120  # seconds for one request or one read
PUT_ATTEMPTS = 3
# Asking for a part's or a download's URL is safe to ask again: a connection reset
# or a 5xx is retried that many times in all (a stale keep-alive connection, a busy
# control plane), instead of failing the backup.
URL_ATTEMPTS = 3
# Completing an upload reads the whole object back from storage: its request may
# take TIMEOUT plus a second per this many bytes.
READ_BACK_RATE = 20 * 1024 * 1024


class TransferError(AgentError):
    code = AgentErrorCode.TRANSFER_FAILED


def _reason(exc):
    if isinstance(exc, urllib.error.HTTPError):
        try:
            body = exc.read(2000).decode(errors="replace").strip()
        except OSError:
            body = ""
        return f"HTTP {exc.code}" + (f": {body}" if body else "")
    return str(getattr(exc, "reason", None) or exc)


class Transfer:
    """The transfer API of one backup (`transfer_url`, from the command's payload)."""

    def __init__(self, transfer_url, credential, part_size=PART_SIZE):
        if not transfer_url.startswith(("http://", "https://")):
            raise TransferError(f"not a transfer URL: {transfer_url!r}")
        self.base, self.credential = transfer_url.rstrip("/"), credential
        self.part_size = part_size

    def _call(self, action, body, timeout=TIMEOUT, attempts=1):
        request = urllib.request.Request(
            f"{self.base}/{action}", data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": f"Bearer {self.credential}",
                     "Content-Type": "application/json", "Accept": "application/json"})
        for attempt in range(1, attempts + 1):
            try:
                with urllib.request.urlopen(request, timeout=timeout) as r:
                    data = r.read(1 << 20)
            except (urllib.error.URLError, OSError) as exc:
                refused = isinstance(exc, urllib.error.HTTPError) and exc.code < 500
                if refused or attempt == attempts:
                    raise TransferError(f"the transfer API refused {action} of "
                                        f"{body.get('object')}: {_reason(exc)}") from exc
                time.sleep(attempt)
                continue
            return json.loads(data) if data.strip() else None

    def call(self, action, body):
        """Another action of the same API (the WAL shipper's `status`)."""
        return self._call(action, body, attempts=URL_ATTEMPTS)

    def part_url(self, name, part_number):
        return self._call("parts", {"object": name, "part_number": part_number},
                          attempts=URL_ATTEMPTS)["url"]

    def complete(self, name, parts, size, sha256, fields=None):
        """Join the parts; the control plane reads the object back from storage
        and refuses it unless it matches. Returns {size, sha256} as read back.
        `fields`: more of the object's, recorded with it (a WAL file's time)."""
        sent = {"size": size, "sha256": sha256}
        stored = self._call("complete", {"object": name, **sent, **(fields or {}), "parts": [
            {"part_number": n, "etag": e} for n, e in parts]},
            timeout=TIMEOUT + size // READ_BACK_RATE)
        if not isinstance(stored, dict) or {k: stored.get(k) for k in sent} != sent:
            raise TransferError(f"the control plane did not confirm {name} as stored "
                                f"({stored!r}; sent {sent})")
        return sent

    def known(self, hashes):
        """{sha256: pack} of the given filestore objects the project already holds."""
        found = self._call("objects", {"sha256": list(hashes)}, attempts=URL_ATTEMPTS)
        if not isinstance(found, dict) or not isinstance(found.get("known"), dict):
            raise TransferError(f"the transfer API's answer on objects is not one: {found!r}")
        return found["known"]

    def download_url(self, name):
        return self._call("download", {"object": name}, attempts=URL_ATTEMPTS)["url"]

    def put_part(self, name, part_number, data):
        """PUT one part to a fresh URL (again, up to PUT_ATTEMPTS times: an upload
        URL is single use); returns its ETag, without quotes."""
        for attempt in range(1, PUT_ATTEMPTS + 1):
            url = self.part_url(name, part_number)
            request = urllib.request.Request(url, data=data, method="PUT", headers={
                "Content-Length": str(len(data)), "Content-Type": "application/octet-stream"})
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT) as r:
                    etag = r.headers.get("ETag")
                    r.read()
            except (urllib.error.URLError, OSError) as exc:
                retry = not isinstance(exc, urllib.error.HTTPError) or exc.code >= 500
                if not retry or attempt == PUT_ATTEMPTS:
                    raise TransferError(f"uploading part {part_number} of {name} failed: "
                                        f"{_reason(exc)}") from exc
                time.sleep(attempt)
                continue
            if not etag:
                raise TransferError(f"the storage gave no ETag for part {part_number} of {name}")
            return etag.strip().strip('"')

    def upload(self, name, chunks, progress=None, pool=None, deferred=False, fields=None):
        """Upload an object from an iterable of byte chunks; returns {size, sha256},
        confirmed by the control plane's read-back of the stored object.
        Parts are filled in buffers of `pool` (a Buffers; two of its own when
        none is given): one is PUT on a thread while the next fills, so the
        producer (pg_dump, tar | zstd) is not stalled for the length of each
        PUT; uploads running at once that share a pool share its memory bound.
        `progress(bytes)` after each part. `deferred`: the parts are sent, and a
        function that completes the upload is returned instead (the control plane's
        read-back of one object may then overlap the next one's upload)."""
        pool = pool or Buffers(2, self.part_size)
        parts, size, digest = [], 0, hashlib.sha256()
        state = {"buf": pool.get(), "fill": 0, "number": 0, "in_flight": None}

        def landed():
            """Wait for the part in flight, if any, and record its ETag."""
            put, state["in_flight"] = state["in_flight"], None
            if put is not None:
                parts.append((put.number, put.wait()))
                if progress:
                    progress(put.done)

        def flush():
            landed()  # one PUT at a time per object: its parts complete in order
            state["number"] += 1
            state["in_flight"] = _Put(self, name, state["number"], state["buf"],
                                      state["fill"], size, pool)
            state["buf"], state["fill"] = None, 0
            state["buf"] = pool.get()  # waits while every buffer is being PUT

        try:
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                view = memoryview(chunk)
                while view:
                    buf, fill = state["buf"], state["fill"]
                    n = min(self.part_size - fill, len(view))
                    buf[fill:fill + n] = view[:n]
                    view, state["fill"] = view[n:], fill + n
                    if state["fill"] == self.part_size:
                        flush()
            if state["fill"] or not state["number"]:  # an empty object is one empty part
                flush()
            landed()
        finally:
            if state["in_flight"] is not None:  # the producer failed: no PUT left behind
                state["in_flight"].join()
            if state["buf"] is not None:
                pool.put(state["buf"])
        sha256 = digest.hexdigest()
        if deferred:
            return lambda: self.complete(name, parts, size, sha256, fields)
        return self.complete(name, parts, size, sha256, fields)

    def download(self, name):
        """The object's bytes, READ_SIZE at a time."""
        url = self.download_url(name)
        try:
            response = urllib.request.urlopen(url, timeout=TIMEOUT)
        except (urllib.error.URLError, OSError) as exc:
            raise TransferError(f"downloading {name} failed: {_reason(exc)}") from exc
        with response:
            while True:
                try:
                    data = response.read(READ_SIZE)
                except OSError as exc:
                    raise TransferError(f"downloading {name} failed: {exc}") from exc
                if not data:
                    return
                yield data


class Buffers:
    """At most `count` part buffers, made when first needed and reused (growing a
    bytearray may copy it whole); `get` waits while all are in use."""

    def __init__(self, count, size):
        self.size, self.free, self.made = size, queue.LifoQueue(), 0
        self.lock, self.count = threading.Lock(), count

    def get(self):
        with self.lock:
            if self.free.empty() and self.made < self.count:
                self.made += 1
                return bytearray(self.size)
        return self.free.get()

    def put(self, buf):
        self.free.put(buf)


class _Put(threading.Thread):
    """One part's PUT, on its own thread, its buffer back to the pool once sent;
    `wait()` returns its ETag or raises."""

    def __init__(self, transfer, name, number, buf, fill, done, pool):
        super().__init__(name="berth-upload", daemon=True)
        self.transfer, self.object, self.number = transfer, name, number
        self.buf, self.fill, self.done, self.pool = buf, fill, done, pool
        self.etag = self.error = None
        self.start()

    def run(self):
        try:
            with memoryview(self.buf) as view:  # no copy of the part
                self.etag = self.transfer.put_part(self.object, self.number, view[:self.fill])
        except BaseException as exc:  # raised in the uploading thread, by wait()
            self.error = exc
        finally:
            self.pool.put(self.buf)

    def wait(self):
        self.join()
        if self.error is not None:
            raise self.error
        return self.etag


class Checked:
    """Chunks passed through while their size and SHA-256 are counted;
    `progress(bytes)` every PART_SIZE or so."""

    def __init__(self, chunks, progress=None):
        self.chunks, self.size, self.digest = chunks, 0, hashlib.sha256()
        self.progress, self._reported = progress, 0

    def __iter__(self):
        for chunk in self.chunks:
            self.size += len(chunk)
            self.digest.update(chunk)
            if self.progress and self.size - self._reported >= PART_SIZE:
                self._reported = self.size
                self.progress(self.size)
            yield chunk

    @property
    def sha256(self):
        return self.digest.hexdigest()
