"""The agent's WAL shipper against the real control plane over HTTP and its real
local storage: finished WAL files leave the spool oldest first, each stored as
it was; one the control plane holds already is only dropped; a failure stops
the pass at that file, which waits (nothing after it is skipped ahead), and the
report says why. The database's side (its system identifier, its archiver
figures) is the e2e test's (tests/e2e/backups/test_wal_flow.py): here the
shipper is told the identifier and reads no archiver."""

import hashlib
import os

import pytest
import zstandard

from agent.backups import wal as shipper
from agent.deploy import archiving
from agent.deploy.environments import Environments
from control_plane.models import Environment, WalFile
from control_plane.services.backups import stores
from tests.control_plane.backups.conftest import V1

SYSTEM = "7301234567890123456"


class NoDatabase(shipper.Shipper):
    """The shipper with its two reads of the database answered here."""

    def _system_id(self, env_id, path):
        return SYSTEM

    def _archiver(self, env_id):
        return None


@pytest.fixture
def spooled(bk, http_app, tmp_path, monkeypatch):
    Environment.update(environment_type="production").where(
        Environment.id == bk.env.id).execute()
    monkeypatch.setattr(os, "chown", lambda *a: None)  # the spool's owner: not ours here
    env_dir = tmp_path / str(bk.env.id)
    env_dir.mkdir()
    archiving.configure(env_dir, {"transfer_url": f"{http_app}/agent/v1/wal/{bk.env.id}"})
    return env_dir / archiving.SPOOL_DIR


def _write(spool, names, at=1_700_000_000):
    for i, name in enumerate(names):
        path = spool / name
        path.write_bytes(name.encode() * 1000)
        os.utime(path, (at + i, at + i))


def _shipper(bk, tmp_path, credential=None):
    token = (credential or bk.credential)["Authorization"].split()[1]
    return NoDatabase(Environments(None, root=tmp_path), token, docker=None)


def _stored():
    return [w.name.split("/")[1] for w in
            WalFile.select().where(WalFile.stored_at.is_null(False)).order_by(WalFile.stored_at)]


def test_files_leave_the_spool_oldest_first_each_as_it_was(client, bk, spooled, tmp_path):
    names = ["000000010000000000000002", "000000010000000000000001", "00000002.history"]
    _write(spooled, names)
    (spooled / "000000010000000000000003.tmp").write_bytes(b"half copied")  # not finished
    _shipper(bk, tmp_path).run_once()
    assert _stored() == [f"{n}.zst" for n in names]
    assert sorted(p.name for p in spooled.iterdir()) == ["000000010000000000000003.tmp"]
    row = WalFile.get(WalFile.name == f"{SYSTEM}/{names[0]}.zst")
    store = stores.for_settings(client.application.extensions["berth"].settings)
    with store.open(row.key) as stored:
        assert zstandard.ZstdDecompressor().decompress(stored.read(), max_output_size=1 << 20) == \
            names[0].encode() * 1000
    r = client.get(f"{V1}/environments/{bk.env.id}/wal-archive", headers=bk.h)
    assert (r.json["status"], r.json["files"], r.json["pending"]) == ("archiving", 3, 0)


def test_a_file_held_already_is_dropped_and_a_failure_waits(client, bk, spooled, tmp_path):
    first = "000000010000000000000001"
    _write(spooled, [first])
    _shipper(bk, tmp_path).run_once()
    _write(spooled, [first, "000000010000000000000002"])  # PostgreSQL copied it again
    stranger = bk.new_server()[1]
    _shipper(bk, tmp_path, credential=stranger).run_once()  # refused: not its server's
    assert sorted(p.name for p in spooled.iterdir()) == [first, "000000010000000000000002"]
    assert _stored() == [f"{first}.zst"]
    _shipper(bk, tmp_path).run_once()
    assert list(spooled.iterdir()) == []
    assert _stored() == [f"{first}.zst", "000000010000000000000002.zst"]


def test_an_upload_that_fails_stops_the_pass_and_is_reported(client, bk, spooled, tmp_path,
                                                             monkeypatch):
    names = ["000000010000000000000001", "000000010000000000000002"]
    _write(spooled, names)
    ship = _shipper(bk, tmp_path)
    real, calls = ship._upload, []

    def failing_second(transfer, path, name):
        calls.append(path.name)
        if path.name == names[1]:
            raise OSError("the disk went away")
        return real(transfer, path, name)
    monkeypatch.setattr(ship, "_upload", failing_second)
    ship.run_once()
    assert _stored() == [f"{names[0]}.zst"] and [p.name for p in spooled.iterdir()] == [names[1]]
    r = client.get(f"{V1}/environments/{bk.env.id}/wal-archive", headers=bk.h)
    assert r.json["status"] == "failing" and "the disk went away" in r.json["error_message"]
    assert r.json["pending"] == 1
    monkeypatch.setattr(ship, "_upload", real)
    ship.run_once()
    r = client.get(f"{V1}/environments/{bk.env.id}/wal-archive", headers=bk.h)
    assert (r.json["status"], r.json["files"], r.json["pending"]) == ("archiving", 2, 0)


def test_archiving_off_removes_the_shippers_config(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "chown", lambda *a: None)
    archiving.configure(tmp_path, {"transfer_url": "http://127.0.0.1:1/agent/v1/wal/x"})
    assert archiving.read(tmp_path)["archive_timeout"] == 30
    archiving.configure(tmp_path, None)
    assert archiving.read(tmp_path) is None


def test_a_segment_is_named_by_the_cluster_its_header_names(client, bk, spooled, tmp_path):
    """Read from the segment itself: the database may be stopped meanwhile."""
    class NoArchiver(shipper.Shipper):
        def _archiver(self, env_id):
            return None
    header = bytes(24) + (7301234567890123999).to_bytes(8, "little")
    (spooled / "000000010000000000000001").write_bytes(header + bytes(1000))
    token = bk.credential["Authorization"].split()[1]
    NoArchiver(Environments(None, root=tmp_path), token, docker=None).run_once()
    assert [w.name for w in WalFile.select()] == [
        "7301234567890123999/000000010000000000000001.zst"]


def _odoo_file(data_dir, content):
    """A file as Odoo stores an attachment's: named by its SHA-1, under 2 hex."""
    sha1 = hashlib.sha1(content).hexdigest()
    path = data_dir / "filestore" / "odoo" / sha1[:2] / sha1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return f"filestore/odoo/{sha1[:2]}/{sha1}"


def test_new_filestore_files_are_archived_once_when_whole(client, bk, spooled, tmp_path,
                                                           monkeypatch):
    data_dir = spooled.parent / "filestore"
    first = _odoo_file(data_dir, b"%PDF-1.7 invoice 1")
    (data_dir / "sessions").mkdir(parents=True)
    (data_dir / "sessions" / "werkzeug_abc.sess").write_bytes(b"not an attachment")
    half = _odoo_file(data_dir, b"%PDF-1.7 invoice 2, whole")
    (data_dir / half).write_bytes(b"%PDF-1.7 inv")  # Odoo still writing it
    ship = _shipper(bk, tmp_path)
    ship.run_once()
    rows = {w.path: w for w in WalFile.select().where(WalFile.path.is_null(False))}
    assert sorted(rows) == [first]
    digest = hashlib.sha256(b"%PDF-1.7 invoice 1").hexdigest()
    assert rows[first].name == f"files/{digest}.zst"
    # Written whole now, it goes with the next look, the first one not again.
    (data_dir / half).write_bytes(b"%PDF-1.7 invoice 2, whole")
    asked = []
    real = shipper.Transfer.call
    monkeypatch.setattr(shipper.Transfer, "call",
                        lambda self, action, body: asked.append(body) or real(self, action, body))
    ship.files_at.clear()
    ship.run_once()
    assert sorted(w.path for w in WalFile.select().where(WalFile.path.is_null(False))) == \
        sorted([first, half])
    assert [b["objects"] for b in asked if "objects" in b] == [
        [f"files/{hashlib.sha256(b'%PDF-1.7 invoice 2, whole').hexdigest()}.zst"]]
    # Within 30 s of a look, no other; the same content at another path is not sent again.
    _odoo_file(data_dir / "filestore" / "copy", b"%PDF-1.7 invoice 1")
    asked.clear()
    ship.run_once()
    assert asked == [] or all("objects" not in b for b in asked)
    ship.files_at.clear()
    ship.run_once()
    assert [b["objects"] for b in asked if "objects" in b] == [[f"files/{digest}.zst"]]
    assert WalFile.select().where(WalFile.path.is_null(False)).count() == 2
