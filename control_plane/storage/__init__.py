"""Where backups are kept: one small interface, two backends picked by
CP_STORAGE_URL (`file:///dir`, the default under the data dir; `s3://bucket/prefix`).

    store = storage.from_settings(settings)
    store.streaming                   # True: URLs stream through the control plane
    store.begin_upload(key) -> upload id
    store.part_url(key, upload_id, part_number, expires=3600) -> URL for an HTTP PUT
    store.complete_upload(key, upload_id, [(part_number, etag), ...])
    store.abort_upload(key, upload_id)
    store.abort_uploads(prefix) -> how many unfinished uploads under the prefix were aborted
    store.get_url(key, expires=3600, filename=None) -> URL for an HTTP GET (Range works)
    store.size(key) -> int | None
    store.open(key) -> readable binary stream
    read_back(store, key) -> {size, sha256} of the object as stored, every byte read
    store.delete_prefix(prefix) -> objects removed

Keys are `/`-separated relative names the control plane makes
(`backups/<env_id>/<backup_id>/database.dump`), never taken from a request.
The agent holds no storage credential: it PUTs and GETs the URLs only."""

import contextlib
import functools
import hashlib
import re
from pathlib import Path
from urllib.parse import urlparse

PART_MAX = 64 * 1024 * 1024  # largest part a local upload URL accepts
MAX_PARTS = 10000  # S3's limit, kept by both backends
READ_BACK_CHUNK = 1024 * 1024
SPOOLED = "berth.spooled"  # WSGI environ: the path of a file holding a PUT's whole body
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_key(key, prefix=False):
    """A key (or, with prefix=True, a key prefix ending in `/`): relative, segments of
    safe characters, no `.`/`..`, no empty segment. Raises ValueError otherwise."""
    body = key[:-1] if prefix and key.endswith("/") else key
    if not isinstance(key, str) or not body or any(
            not _SEGMENT.fullmatch(seg) or seg in (".", "..") for seg in body.split("/")):
        raise ValueError(f"not a valid storage key: {key!r}")
    return key


def read_back(store, key):
    """The object's size and SHA-256, from every byte storage now holds (a local
    file from the page cache or disk, an S3 object over the network)."""
    digest, size = hashlib.sha256(), 0
    with contextlib.closing(store.open(key)) as body:
        while chunk := body.read(READ_BACK_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def check_part_number(part_number):
    if not (isinstance(part_number, int) and 1 <= part_number <= MAX_PARTS):
        raise ValueError(f"part number must be 1..{MAX_PARTS}, got {part_number!r}")
    return part_number


def from_settings(settings):
    """The store the settings name; one per distinct configuration (a boto3 client
    is worth keeping)."""
    return _store(settings.get("STORAGE_URL") or "", settings.get("S3_ENDPOINT_URL") or "",
                  settings["DATA_DIR"], settings["SECRET_KEY"], settings["PUBLIC_URL"])


@functools.lru_cache(maxsize=16)
def _store(url, endpoint, data_dir, secret, public_url):
    parsed = urlparse(url)
    if not url:
        from control_plane.storage.local import LocalStorage

        return LocalStorage(Path(data_dir) / "storage", secret, public_url)
    if parsed.scheme == "file":
        from control_plane.storage.local import LocalStorage

        return LocalStorage(Path(parsed.path), secret, public_url)
    if parsed.scheme == "s3" and parsed.netloc:
        from control_plane.storage.s3 import S3Storage

        return S3Storage(parsed.netloc, parsed.path.strip("/"), endpoint or None)
    raise ValueError(f"CP_STORAGE_URL must be file:///dir or s3://bucket/prefix, got {url!r}")
