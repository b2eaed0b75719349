"""The local backend: objects are files under one owner-only directory, and the
URLs point at the control plane itself (control_plane/api/storage_urls.py).

    <root>/objects/<key>                  complete objects
    <root>/uploads/<upload id>/key        the key an upload is for
    <root>/uploads/<upload id>/<part>-<etag>  parts received (00001-<nonce> ...)
    <root>/uploads/<upload id>/used/<n>   nonces of the PUT URLs already used
    <root>/uploads/.spool-*               part bodies the HTTP server is receiving

A part's ETag is its PUT URL's one-time nonce, not a hash of it: nothing reads
a part twice on the way in, and the whole object's SHA-256 is checked when its
upload is completed (storage.read_back).

Every path is built from a checked key or from ids the control plane made
(hex), never from anything a request says."""

import os
import re
import secrets
import shutil
from pathlib import Path

from control_plane.infra.config import private_dir
from control_plane.storage import check_key, check_part_number, tokens
from control_plane.vocabulary.errors import InvalidPart, StorageUrlUsed, UploadNotFound

CHUNK = 1024 * 1024
_UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
_ETAG = re.compile(r"[0-9a-f]{32}")


class LocalStorage:
    streaming = True

    def __init__(self, root, secret, public_url):
        self.root = Path(root)
        self._secret = secret
        self._base = public_url.rstrip("/") + tokens.PATH

    # --- the interface ---------------------------------------------------
    def begin_upload(self, key):
        check_key(key)
        upload_id = secrets.token_hex(16)
        folder = _mkdirs(self.root, "uploads", upload_id)
        _write_new(folder / "key", key.encode())
        return upload_id

    def part_url(self, key, upload_id, part_number, expires=3600):
        token = tokens.sign(self._secret, op="put", key=key, expires=expires,
                            upload_id=upload_id, part=part_number)
        return self._base + token

    def complete_upload(self, key, upload_id, parts):
        """Join the parts, in order, into the object: the first part's file becomes
        it and the others are appended in the kernel; built beside the object,
        then renamed over it, so a reader sees the old object or the whole new one."""
        folder = self._upload(key, upload_id)
        numbers = [check_part_number(n) for n, _ in parts]
        if not numbers or numbers != sorted(set(numbers)):
            raise InvalidPart("Parts must be listed once each, in ascending order.")
        files = [_part_file(folder, number, etag) for number, etag in parts]
        target = self.object_path(key)
        _mkdirs(self.root, "objects", *key.split("/")[:-1])
        tmp = target.with_name(f".{target.name}.{upload_id}.tmp")
        try:
            try:
                os.replace(files[0], tmp)
            except FileNotFoundError:  # another complete of this upload took it
                raise UploadNotFound() from None
            # Unbuffered and not O_APPEND, which copy_file_range refuses.
            with open(tmp, "r+b", buffering=0) as out:
                out.seek(0, os.SEEK_END)
                try:
                    for path in files[1:]:
                        _append(out, path)
                except FileNotFoundError:  # an abort of this upload removed the rest
                    raise UploadNotFound() from None
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)

    def abort_upload(self, key, upload_id):
        try:
            folder = self._upload(key, upload_id)
        except UploadNotFound:
            return
        shutil.rmtree(folder, ignore_errors=True)

    def abort_uploads(self, prefix):
        check_key(prefix, prefix=True)
        aborted = 0
        uploads = self.root / "uploads"
        for folder in uploads.iterdir() if uploads.is_dir() else ():
            try:
                key = (folder / "key").read_text()
            except (FileNotFoundError, NotADirectoryError):
                continue
            if key.startswith(prefix):
                shutil.rmtree(folder, ignore_errors=True)
                aborted += 1
        return aborted

    def get_url(self, key, expires=3600, filename=None):
        return self._base + tokens.sign(self._secret, op="get", key=key, expires=expires,
                                        filename=filename)

    def size(self, key):
        try:
            return self.object_path(key).stat().st_size
        except FileNotFoundError:
            return None

    def open(self, key):
        return open(self.object_path(key), "rb")  # the caller closes it

    def delete_prefix(self, prefix):
        check_key(prefix, prefix=True)
        objects = self.root / "objects"
        head = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        base = objects / head if head else objects
        removed = 0
        for dirpath, _dirs, files in os.walk(base, topdown=False):
            for name in files:
                path = Path(dirpath) / name
                if path.relative_to(objects).as_posix().startswith(prefix):
                    path.unlink(missing_ok=True)
                    removed += 1
            if Path(dirpath) != objects and not os.listdir(dirpath):
                os.rmdir(dirpath)
        return removed

    # --- for the URL views -----------------------------------------------
    def object_path(self, key):
        return self.root / "objects" / check_key(key)

    def spool_dir(self):
        """Where the HTTP server writes a part's body as it arrives: on the same
        filesystem as the parts, so that receive_part moves it into place."""
        return _mkdirs(self.root, "uploads")

    def receive_part(self, claims, stream, spooled=None):
        """Store one part (a signed PUT's claims) and return its ETag, the URL's
        nonce. `spooled`: the path of a file holding the whole body, moved into
        place when it is on this filesystem; else `stream` is copied in CHUNK
        pieces. The nonce is claimed first: a replay is refused."""
        folder = self._upload(claims["key"], claims["upload"])
        used = _mkdirs(folder, "used")
        try:
            os.close(os.open(used / claims["nonce"], os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                             0o600))
        except FileExistsError:
            raise StorageUrlUsed() from None
        target = folder / f"{claims['part']:05d}-{claims['nonce']}"
        tmp = folder / f".{claims['part']:05d}.{claims['nonce']}.tmp"
        if not (spooled and _moved(spooled, target)):
            try:
                with _open_new(tmp) as out:
                    while chunk := stream.read(CHUNK):
                        out.write(chunk)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
        for other in folder.glob(f"{claims['part']:05d}-*"):  # a part sent again replaces it
            if other != target:
                other.unlink(missing_ok=True)
        return claims["nonce"]

    def _upload(self, key, upload_id):
        """The folder of an open upload for `key`."""
        check_key(key)
        if not (isinstance(upload_id, str) and _UPLOAD_ID.fullmatch(upload_id)):
            raise UploadNotFound()
        folder = self.root / "uploads" / upload_id
        try:
            if (folder / "key").read_bytes().decode() != key:
                raise UploadNotFound()
        except FileNotFoundError:
            raise UploadNotFound() from None
        return folder


def _moved(path, target):
    """`path` renamed to `target`; False when it is on another filesystem."""
    try:
        os.replace(path, target)
    except OSError:
        return False
    return True


def _part_file(folder, number, etag):
    """The file of part `number` whose ETag is `etag`."""
    etag = str(etag).strip('"')
    if _ETAG.fullmatch(etag):
        path = folder / f"{number:05d}-{etag}"
        if path.exists():
            return path
    if any(folder.glob(f"{number:05d}-*")):
        raise InvalidPart(f"Part {number}'s ETag does not match what was uploaded.")
    raise InvalidPart(f"Part {number} was not uploaded.")


def _append(out, path):
    """The file at `path` appended to `out`, copied by the kernel (no trip through
    this process; a filesystem that can share blocks does not copy them at all)."""
    with open(path, "rb") as part:
        size = os.fstat(part.fileno()).st_size
        done = 0
        while done < size:
            try:
                n = os.copy_file_range(part.fileno(), out.fileno(), size - done)
            except OSError:  # not across these files: the plain way
                part.seek(done)
                shutil.copyfileobj(part, out, CHUNK)
                return
            if n == 0:
                raise InvalidPart("A part changed while the upload was completed.")
            done += n


def _mkdirs(root, *names):
    """root/names..., each directory created owner-only (mkdir's parents are not)."""
    path = private_dir(root)
    for name in names:
        path = path / name
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
    return path


def _open_new(path):
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def _write_new(path, data):
    with _open_new(path) as fh:
        fh.write(data)
