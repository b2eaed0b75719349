"""Odoo's backup zip, both ways: written to a pipe, read back over HTTP range
requests from a real local server, checked by zipfile and `unzip -t`; hostile
imports refused with their codes and nothing written outside the destination."""

import hashlib
import json
import os
import random
import re
import shutil
import stat
import subprocess
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.backups import odoo_zip as of
from agent.backups.odoo_zip import RangeFile

HEADER = b"--\n-- PostgreSQL database dump\n--\n\nSET statement_timeout = 0;\n"
MANIFEST = {"db_name": "odoo", "version": "17.0", "pg_version": "16.4",
            "modules": {"base": "17.0.1.3", "web": "17.0.1.0"}}


# -- a real HTTP server with Range support --------------------------------------

class _Ranges(BaseHTTPRequestHandler):
    files = {}       # URL path -> file path
    served = [0]     # body bytes sent
    ranges = True    # False: a server that ignores Range

    def do_GET(self):  # noqa: N802 (http.server's naming)
        path = self.files.get(self.path)
        if path is None:
            return self._answer(404)
        size = os.path.getsize(path)
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if not match or not self.ranges:
            return self._send(path, 200, 0, size, {})
        first, last = match.groups()
        if first == "":
            first, last = max(size - int(last), 0), size - 1
        else:
            first, last = int(first), min(int(last) if last else size - 1, size - 1)
        if first >= size:
            return self._answer(416, {"Content-Range": f"bytes */{size}"})
        self._send(path, 206, first, last + 1 - first,
                   {"Content-Range": f"bytes {first}-{last}/{size}"})

    def _send(self, path, code, first, length, headers):
        self._answer(code, {**headers, "Content-Length": str(length)})
        with open(path, "rb") as f:
            f.seek(first)
            self.wfile.write(f.read(length))
        self.served[0] += length

    def _answer(self, code, headers=None):
        self.send_response(code)
        for key, value in (headers or {"Content-Length": "0"}).items():
            self.send_header(key, value)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_files():
    """serve(path) -> URL of that file on a real HTTP server on 127.0.0.1."""
    _Ranges.files, _Ranges.served, _Ranges.ranges = {}, [0], True
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ranges)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def serve(path):
        name = f"/objects/{len(_Ranges.files)}"
        _Ranges.files[name] = str(path)
        return f"http://127.0.0.1:{server.server_address[1]}{name}"

    serve.served = _Ranges.served
    yield serve
    server.shutdown()
    server.server_close()


# -- building the inputs -------------------------------------------------------------

def _data_dir(root):
    """An ERP data dir: the database's filestore (compressible and random files,
    a symlink) beside sessions, which are not part of a backup zip."""
    rnd = random.Random(7)
    store = root / "filestore" / "odoo"
    files = {"ab/ab01": b"invoice line\n" * 50_000, "cd/cd02": rnd.randbytes(3 << 20),
             "cd/cd03": b"", "ef/ef04": b"x"}
    for rel, body in files.items():
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (store / rel).write_bytes(body)
    os.symlink("/etc/passwd", store / "ab" / "link")
    (root / "sessions").mkdir()
    (root / "sessions" / "s1").write_bytes(b"session")
    return files


def _dump_chunks():
    rnd = random.Random(3)
    yield HEADER
    for i in range(40):
        yield b"".join(b"INSERT INTO t VALUES (%d, '%s');\n" % (i * 1000 + j, rnd.randbytes(24).hex().encode())
                       for j in range(1000))


def _write_through_pipe(path, data_dir):
    """write_odoo_zip into a real pipe (unseekable), a thread copying it to `path`."""
    read_fd, write_fd = os.pipe()

    def drain():
        with os.fdopen(read_fd, "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)

    copier = threading.Thread(target=drain)
    copier.start()
    tar = subprocess.Popen(["tar", "-C", str(data_dir), "-cf", "-", "."], stdout=subprocess.PIPE)
    with os.fdopen(write_fd, "wb") as out:
        summary = of.write_odoo_zip(out, _dump_chunks(), tar.stdout, MANIFEST,
                                    prefix="filestore/odoo/")
    assert tar.wait() == 0
    copier.join()
    return summary


def _zip(path, members):
    """A zip from (ZipInfo or name, bytes) pairs, written as given."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, body in members:
            zf.writestr(info, body)
    return path


def _manifest(major="17.0"):
    return json.dumps({"odoo_dump": "1", "db_name": "x", "version": major,
                       "major_version": major, "pg_version": "16.0", "modules": {}})


def _valid(*extra):
    return [("dump.sql", HEADER), ("manifest.json", _manifest()), *extra]


# -- round trip ----------------------------------------------------------------------

def test_round_trip_through_a_pipe_and_range_requests(tmp_path, http_files):
    data_dir = tmp_path / "data"
    files = _data_dir(data_dir)
    backup = tmp_path / "backup.zip"
    summary = _write_through_pipe(backup, data_dir)
    assert summary["files"] == len(files) and summary["skipped"] == 1  # the symlink

    with zipfile.ZipFile(backup) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        manifest = json.loads(zf.read("manifest.json"))
    assert names[0] == "dump.sql" and names[-1] == "manifest.json"
    assert sorted(names[1:-1]) == sorted("filestore/" + rel for rel in files)
    assert manifest == {"odoo_dump": "1", "db_name": "odoo", "version": "17.0",
                        "version_info": [17, 0, 0, "final", 0, ""], "major_version": "17.0",
                        "pg_version": "16.4", "modules": MANIFEST["modules"]}
    if shutil.which("unzip"):
        subprocess.run(["unzip", "-tq", str(backup)], check=True, capture_output=True)

    size = backup.stat().st_size
    url = http_files(backup)
    with RangeFile(url, block=256 << 10) as remote:
        info = of.inspect_import(remote, "17.0")
        assert info["kind"] == "zip" and info["major_version"] == "17.0"
        assert info["files"] == len(files) and info["dump_size"] == summary["dump_size"]
        assert http_files.served[0] < size / 2  # the directory and heads, not the whole zip

        zf = of.open_zip(remote)
        dumped = hashlib.sha256()
        for chunk in of.iter_member(zf, "dump.sql"):
            dumped.update(chunk)
        assert dumped.digest() == hashlib.sha256(b"".join(_dump_chunks())).digest()

        uid = 101 if os.geteuid() == 0 else os.getuid()
        dest = tmp_path / "restored"
        result = of.extract_filestore(zf, dest, uid, uid)
    assert result["files"] == len(files)
    for rel, body in files.items():
        assert (dest / rel).read_bytes() == body
        assert (dest / rel).stat().st_uid == uid
    assert (dest / "ab").stat().st_uid == uid and dest.stat().st_uid == uid


def test_range_file_reads_any_range_with_one_block_held(tmp_path, http_files):
    data = random.Random(1).randbytes(300_000)
    (tmp_path / "blob").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    f = RangeFile(http_files(tmp_path / "blob"), block=64 << 10)
    assert f.size == len(data) and f.seek(0, 2) == len(data)
    for first, n in [(0, 10), (65_530, 20), (299_990, 50), (1000, 200_000), (300_000, 5)]:
        f.seek(first)
        assert f.read(n) == data[first:first + n]
        assert len(f._buf) <= 64 << 10
    f.seek(0)
    assert f.read() == data
    with pytest.raises(OSError):
        f.seek(-1)
    assert RangeFile(http_files(tmp_path / "empty")).read() == b""
    with pytest.raises(of.DownloadFailed):
        RangeFile(http_files(tmp_path / "blob").replace("/objects/", "/missing/"))


def test_range_file_without_range_support(tmp_path, http_files):
    """A server answering 200 to a range request: fine for one block, refused past it."""
    _Ranges.ranges = False
    (tmp_path / "small").write_bytes(b"s" * 1000)
    (tmp_path / "large").write_bytes(b"l" * 100_000)
    assert RangeFile(http_files(tmp_path / "small"), block=4096).read() == b"s" * 1000
    with pytest.raises(of.DownloadFailed) as failed:
        RangeFile(http_files(tmp_path / "large"), block=4096)
    assert failed.value.code == "download_failed"


def test_failed_source_leaves_no_valid_zip(tmp_path):
    """A dump that fails midway (pg_restore died) must not yield a zip that looks whole."""
    def failing():
        yield HEADER
        raise RuntimeError("pg_restore exited with 1")

    with open(tmp_path / "out.zip", "wb") as out, pytest.raises(RuntimeError):
        of.write_odoo_zip(out, failing(), None, MANIFEST)
    assert (tmp_path / "out.zip").stat().st_size > 0
    assert not zipfile.is_zipfile(tmp_path / "out.zip")


# -- bare dumps ---------------------------------------------------------------------

def test_bare_dumps_are_recognised_and_random_bytes_refused(tmp_path):
    custom = tmp_path / "db.dump"
    custom.write_bytes(b"PGDMP\x01\x10\x00\x04\x08\x08\x01\x01" + bytes(100))
    plain = tmp_path / "db.sql"
    plain.write_bytes(HEADER + b"CREATE TABLE t (id int);\n")
    assert of.inspect_import(custom, "17.0") == {"kind": "dump", "size": 113}
    assert of.inspect_import(str(plain), "17.0")["kind"] == "sql"
    noise = tmp_path / "noise"
    noise.write_bytes(random.Random(5).randbytes(4096))
    with pytest.raises(of.UnrecognisedImport) as refused:
        of.inspect_import(noise, "17.0")
    assert refused.value.code == "import_unrecognised"


# -- hostile zips -------------------------------------------------------------------

def _symlink():
    info = zipfile.ZipInfo("filestore/ab/link")
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return _valid((info, b"/etc/passwd"))


def _lying(chunk, count, declared):
    """A member of `count` times `chunk` whose central directory declares `declared` bytes."""
    def build(path):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, body in _valid():
                zf.writestr(name, body)
            with zf.open("filestore/ab/big", "w") as dst:
                for _ in range(count):
                    dst.write(chunk)
            zf.getinfo("filestore/ab/big").file_size = declared
        return path
    return build


def _overlapping(path):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in _valid(("filestore/a1", b"a" * 1000), ("filestore/a2", b"a" * 1000)):
            zf.writestr(name, body)
        zf.getinfo("filestore/a2").header_offset = zf.getinfo("filestore/a1").header_offset
    return path


HOSTILE = {
    "parent": (lambda p: _zip(p, _valid(("../x", b"x"))), "import_unsafe_member"),
    "absolute": (lambda p: _zip(p, _valid(("/etc/x", b"x"))), "import_unsafe_member"),
    "climbing": (lambda p: _zip(p, _valid(("filestore/../../x", b"x"))), "import_unsafe_member"),
    "backslash": (lambda p: _zip(p, _valid(("filestore\\..\\x", b"x"))), "import_unsafe_member"),
    "stranger": (lambda p: _zip(p, _valid(("odoo.conf", b"x"))), "import_unsafe_member"),
    "duplicate": (lambda p: _zip(p, _valid(("filestore/a", b"1"), ("filestore/a", b"2"))),
                  "import_unsafe_member"),
    "symlink": (lambda p: _zip(p, _symlink()), "import_unsafe_member"),
    "understated": (_lying(bytes(1 << 20), 64, 1000), "import_corrupt"),
    "overstated": (_lying(random.Random(2).randbytes(100_000), 1, 5 << 20), "import_corrupt"),
    "overlapping": (_overlapping, "import_zip_bomb"),
    "other_major": (lambda p: _zip(p, [("dump.sql", HEADER), ("manifest.json", _manifest("16.0"))]),
                    "import_version_mismatch"),
    "bad_manifest": (lambda p: _zip(p, [("dump.sql", HEADER), ("manifest.json", b"{nope")]),
                     "import_bad_manifest"),
    "no_dump": (lambda p: _zip(p, [("manifest.json", _manifest())]), "import_missing_dump"),
    "not_a_dump": (lambda p: _zip(p, [("dump.sql", b"hello, world\n"), ("manifest.json", _manifest())]),
                   "import_not_a_dump"),
    "custom_in_zip": (lambda p: _zip(p, [("dump.sql", b"PGDMP\x01\x10"), ("manifest.json", _manifest())]),
                      "import_not_a_dump"),
}


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_zip_refused_and_nothing_written(case, tmp_path):
    build, code = HOSTILE[case]
    archive = build(tmp_path / "in.zip")
    before = sorted(p for p in tmp_path.parent.iterdir())
    dest = tmp_path / "work" / "filestore.new"
    dest.parent.mkdir()
    with pytest.raises(of.ImportRefused) as refused:
        of.inspect_import(archive, "17.0")
        # Past the checks of the whole (version, dump): extraction refuses it itself.
        with zipfile.ZipFile(archive) as zf:
            of.extract_filestore(zf, dest, os.getuid(), os.getgid())
    assert refused.value.code == code, refused.value
    assert not dest.exists() and list((tmp_path / "work").iterdir()) == []
    assert sorted(p for p in tmp_path.parent.iterdir()) == before
    assert not os.path.exists("/etc/x")


@pytest.mark.parametrize("case", ["parent", "climbing", "symlink", "understated", "overstated"])
def test_extraction_checks_on_its_own(case, tmp_path):
    """extract_filestore refuses what inspect_import would, without it."""
    build, code = HOSTILE[case]
    dest = tmp_path / "filestore.new"
    with zipfile.ZipFile(build(tmp_path / "in.zip")) as zf, pytest.raises(of.ImportRefused) as refused:
        of.extract_filestore(zf, dest)
    assert refused.value.code == code
    assert not dest.exists()


def test_zip_bomb_refused(tmp_path):
    """1 GiB of zeros (about 1 MiB deflated), made in 1 MiB chunks."""
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, body in _valid():
            zf.writestr(name, body)
        with zf.open("filestore/ab/bomb", "w", force_zip64=True) as dst:
            zeros = bytes(1 << 20)
            for _ in range(1024):
                dst.write(zeros)
    assert path.stat().st_size < 10 << 20
    with pytest.raises(of.ZipBomb) as refused:
        of.inspect_import(path, "17.0")
    assert refused.value.code == "import_zip_bomb"
    # Also enforced on the bytes: a looser declared check still stops at the bound.
    loose = of.Limits(max_total=2 << 30, max_ratio=200)
    with zipfile.ZipFile(path) as zf:
        stream = of.safe_zip.stream(zf, zf.getinfo("filestore/ab/bomb"), loose, [0])
        with pytest.raises(of.ZipBomb):
            for _ in stream:
                pass


def test_zip64_end_records_are_read(tmp_path, monkeypatch):
    """Past 65535 members (here: past a lowered limit) the end records are zip64's."""
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 3)
    archive = _zip(tmp_path / "in.zip", _valid(*((f"filestore/f{i}", b"x") for i in range(5))))
    monkeypatch.undo()
    assert of.safe_zip._directory(open(archive, "rb"))[0] == 7
    assert of.inspect_import(archive, "17.0")["files"] == 5


def test_total_size_limit(tmp_path):
    archive = _zip(tmp_path / "in.zip", _valid(("filestore/a", b"a" * 5000)))
    with pytest.raises(of.ImportTooLarge):
        of.inspect_import(archive, "17.0", of.Limits(max_total=4000))
    with pytest.raises(of.ImportTooLarge):
        of.inspect_import(archive, "17.0", of.Limits(max_members=2))
    assert of.inspect_import(archive, "17.0")["filestore_size"] == 5000
