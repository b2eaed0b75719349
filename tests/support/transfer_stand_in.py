"""A stand-in for the control plane's transfer API, for the agent's backup tests:
a real HTTP server (stdlib, 127.0.0.1, a port of its own, on a thread) that
keeps a backup's objects in a directory, the way the control plane's local
storage backend does.

  POST /agent/v1/transfers/<backup_id>/parts     {object, part_number} -> {url}
  POST /agent/v1/transfers/<backup_id>/complete  {object, parts: [{part_number, etag}],
                                                  size, sha256} -> {size, sha256} read back
  POST /agent/v1/transfers/<backup_id>/download  {object} -> {url}
  PUT  /put/<token>   one part (single use), streamed to disk; ETag = MD5 hex
  GET  /get/<token>   an object, with Range (suffix ranges too)

The transfer calls need `Authorization: Bearer <credential>`; the part and
download URLs need nothing. It records every part's size (`part_sizes`),
`fail_puts` makes the next part uploads answer 500 (storage unreachable), and
an object named in `mangle` has a byte changed as it is stored (storage that
does not keep what it was sent)."""

import hashlib
import http.server
import json
import re
import secrets
import threading
from pathlib import Path

OBJECTS = {"database.dump", "filestore.tar.zst", "filestore.tar.gz", "manifest.json",
           "odoo-export.zip", "upload"}


class TransferStandIn:
    def __init__(self, root, credential):
        self.root, self.credential = Path(root), credential
        self.tokens = {}  # token -> ("put", backup, object, part) | ("get", backup, object)
        self.part_sizes = []
        self.fail_puts = 0
        self.mangle = set()
        self.lock = threading.Lock()
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                stand_in._post(self)

            def do_PUT(self):
                stand_in._put(self)

            def do_GET(self):
                stand_in._get(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def transfer_url(self, backup_id):
        return f"{self.url}/agent/v1/transfers/{backup_id}"

    def path(self, backup_id, name):
        return self.root / backup_id / name

    # --- handlers ---------------------------------------------------------------

    def _send(self, h, status, body=None, headers=()):
        data = b"" if body is None else json.dumps(body).encode()
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        if body is not None:
            h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _token(self, entry):
        token = secrets.token_urlsafe(16)
        with self.lock:
            self.tokens[token] = entry
        return token

    def _post(self, h):
        m = re.fullmatch(r"/agent/v1/transfers/([\w-]+)/(parts|complete|download)", h.path)
        if not m:
            return self._send(h, 404, {"error": "not_found"})
        if h.headers.get("Authorization") != f"Bearer {self.credential}":
            return self._send(h, 401, {"error": "unauthorized"})
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        backup_id, action, name = m.group(1), m.group(2), body.get("object")
        if name not in OBJECTS:
            return self._send(h, 422, {"error": "validation_error", "message": "unknown object"})
        if action == "parts":
            token = self._token(("put", backup_id, name, int(body["part_number"])))
            return self._send(h, 200, {"url": f"{self.url}/put/{token}"})
        if action == "download":
            if not self.path(backup_id, name).exists():
                return self._send(h, 404, {"error": "not_found"})
            return self._send(h, 200, {"url": f"{self.url}/get/{self._token(('get', backup_id, name))}"})
        return self._complete(h, backup_id, name, body)

    def _complete(self, h, backup_id, name, body):
        target = self.path(backup_id, name)
        with open(target, "wb") as out:
            for part in sorted(body["parts"], key=lambda p: p["part_number"]):
                piece, md5 = self.path(backup_id, f".{name}.{part['part_number']}"), hashlib.md5()
                with open(piece, "rb") as f:  # a piece at a time: the tests measure memory
                    while data := f.read(65536):
                        md5.update(data)
                        out.write(data)
                if md5.hexdigest() != part["etag"]:
                    return self._send(h, 400, {"error": "bad_etag"})
                piece.unlink()
        if name in self.mangle and target.stat().st_size:
            with open(target, "r+b") as f:
                first = f.read(1)
                f.seek(0)
                f.write(bytes([first[0] ^ 0xFF]))
        digest, size = hashlib.sha256(), 0
        with open(target, "rb") as f:  # read back, as the control plane does
            while data := f.read(65536):
                digest.update(data)
                size += len(data)
        stored = {"size": size, "sha256": digest.hexdigest()}
        if stored != {"size": body["size"], "sha256": body["sha256"]}:
            return self._send(h, 422, {"error": "validation_error",
                                       "message": f"{name} in storage does not match what was sent"})
        self._send(h, 200, stored)

    def _put(self, h):
        with self.lock:
            entry = self.tokens.pop(h.path.removeprefix("/put/"), None)  # single use
            failing = self.fail_puts > 0
            self.fail_puts -= failing
        if entry is None or entry[0] != "put":
            return self._send(h, 403, {"error": "forbidden"})
        left = int(h.headers["Content-Length"])
        self.part_sizes.append(left)
        _, backup_id, name, part = entry
        piece = self.path(backup_id, f".{name}.{part}")
        piece.parent.mkdir(parents=True, exist_ok=True)
        md5 = hashlib.md5()
        with open(piece, "wb") as out:
            while left:
                data = h.rfile.read(min(left, 65536))
                if not data:
                    break
                left -= len(data)
                md5.update(data)
                out.write(data)
        if failing:
            return self._send(h, 500, {"error": "storage_unavailable"})
        self._send(h, 200, headers=[("ETag", f'"{md5.hexdigest()}"')])

    def _get(self, h):
        entry = self.tokens.get(h.path.removeprefix("/get/"))
        if entry is None or entry[0] != "get":
            return self._send(h, 403, {"error": "forbidden"})
        path = self.path(entry[1], entry[2])
        total = path.stat().st_size
        start, end, status = 0, total - 1, 200
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", h.headers.get("Range") or "")
        if m and m.group(1):
            start, status = int(m.group(1)), 206
            end = min(int(m.group(2)), total - 1) if m.group(2) else total - 1
        elif m and m.group(2):  # a suffix: the last N bytes
            start, status = max(0, total - int(m.group(2))), 206
        h.send_response(status)
        h.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        h.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            left = end - start + 1
            while left > 0:
                data = f.read(min(left, 65536))
                if not data:
                    break
                h.wfile.write(data)
                left -= len(data)
