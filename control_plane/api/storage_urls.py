"""The local storage backend's signed URLs, `/storage/v1/<token>`: GET streams an
object (Range requests resume a download), PUT stores one part of an upload.
No auth header: the token is the permission, and the only thing of the request
that names what is read or written (control_plane/storage/tokens.py)."""

from flask import Blueprint, Response, current_app, request, send_file, stream_with_context
from werkzeug.exceptions import RequestedRangeNotSatisfiable

from control_plane import storage
from control_plane.services.backups import objects
from control_plane.storage import SPOOLED, tokens
from control_plane.storage.local import LocalStorage
from control_plane.vocabulary.errors import NotFound, PartTooLarge, RangeNotSatisfiable

blp = Blueprint("storage_urls", __name__)


def _store():
    store = storage.from_settings(current_app.config)
    if not isinstance(store, LocalStorage):
        raise NotFound()  # S3 URLs are S3's own; none are served here
    return store


@blp.get(tokens.PATH + "<token>")
def download(token):
    store = _store()
    claims = tokens.verify(current_app.config["SECRET_KEY"], token, "get")
    path = store.object_path(claims["key"])
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise NotFound() from None
    filename = claims.get("filename")
    _whole_for_long_suffix(size)
    try:
        response = send_file(path, mimetype="application/octet-stream", conditional=True,
                             as_attachment=bool(filename), download_name=filename or path.name,
                             etag=False, max_age=0)
    except RequestedRangeNotSatisfiable:
        raise RangeNotSatisfiable(headers={"Content-Range": f"bytes */{size}"}) from None
    if not filename:
        response.headers.pop("Content-Disposition", None)
    response.headers["Accept-Ranges"] = "bytes"
    response.headers["Cache-Control"] = "private, no-store"
    return response


@blp.get(tokens.PATH + "filestore/<token>")
def filestore_archive(token):
    """A backup's filestore as one tar, composed from its project's objects."""
    chunks, filename = objects.archive(token, current_app.config)
    return Response(stream_with_context(chunks), mimetype="application/x-tar", headers={
        "Content-Disposition": f'attachment; filename="{filename or "filestore.tar"}"',
        "Cache-Control": "private, no-store"})


def _whole_for_long_suffix(size):
    """A suffix range longer than the object (`bytes=-N`, N >= size) means all of
    it (RFC 9110 14.1.2), as S3 answers; werkzeug would answer 416. A reader
    learning a small object's size with its first request depends on it."""
    rng = request.range
    if size and rng and rng.units == "bytes" and len(rng.ranges) == 1:
        start, end = rng.ranges[0]
        if end is None and start < 0 and -start >= size:
            request.environ["HTTP_RANGE"] = f"bytes=0-{size - 1}"


@blp.put(tokens.PATH + "<token>")
def upload_part(token):
    store = _store()
    claims = tokens.verify(current_app.config["SECRET_KEY"], token, "put")
    if (request.content_length or 0) > storage.PART_MAX:
        raise PartTooLarge(f"A part may hold at most {storage.PART_MAX} bytes.")
    # This route's own body limit (the app's is 1 MiB); a chunked body past it
    # stops the read with a 413 as well.
    request.max_content_length = storage.PART_MAX
    # The HTTP server spools a part's body to a file beside the parts (server.py).
    etag = store.receive_part(claims, request.stream, spooled=request.environ.get(SPOOLED))
    return "", 200, {"ETag": f'"{etag}"'}
