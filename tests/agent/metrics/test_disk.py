"""The agent's periodic disk measurement of an environment's directories, on
a real filesystem: figures as `du` counts them, and a quiet tree not walked again."""

import os
import uuid

import pytest

from agent.metrics import disk, disk_walk
from agent.metrics.disk import DiskMeter
from agent.metrics.disk_walk import Tree
from tests.support.agents import wait_for

ENV_ID = "0f0e0d0c-0b0a-4909-8807-060504030201"


def _allocated(*paths):
    return sum(os.stat(p).st_blocks * 512 for p in paths)


@pytest.fixture
def old_mtimes(monkeypatch):
    """Directories changed "just now" are re-walked on principle (coarse mtimes):
    tests that look at skipping set their trees' mtimes an hour back."""
    def settle(root):
        for dirpath, _, _ in os.walk(root):
            os.utime(dirpath, ns=(os.stat(dirpath).st_atime_ns,
                                  os.stat(dirpath).st_mtime_ns - 3600 * 10**9))
    return settle


def test_figure_counts_allocated_blocks_of_files_and_directories(tmp_path):
    root = tmp_path / "filestore"
    (root / "odoo" / "ab").mkdir(parents=True)
    a = root / "odoo" / "ab" / "a"
    a.write_bytes(os.urandom(300_000))
    b = root / "odoo" / "b"
    b.write_bytes(os.urandom(5))
    os.link(a, root / "hard")  # the same blocks twice: counted once
    (root / "odoo" / "link").symlink_to("/etc")  # not followed
    expected = _allocated(a, b, root, root / "odoo", root / "odoo" / "ab") + os.lstat(
        root / "odoo" / "link").st_blocks * 512
    assert Tree(str(root)).measure() == expected
    assert expected >= 300_005


def test_missing_directory_is_none(tmp_path):
    assert Tree(str(tmp_path / "nope")).measure() is None


def test_quiet_tree_is_not_walked_again_until_a_directory_changes(tmp_path, old_mtimes):
    root = tmp_path / "filestore"
    (root / "odoo" / "ab").mkdir(parents=True)
    (root / "odoo" / "ab" / "x").write_bytes(os.urandom(10_000))
    old_mtimes(root)
    tree = Tree(str(root))
    first = tree.measure()
    assert tree.walks == 1
    assert tree.measure() == first and tree.walks == 1  # nothing changed: no walk
    # A new file deep down changes its directory's mtime: walked again.
    (root / "odoo" / "ab" / "y").write_bytes(os.urandom(50_000))
    assert tree.measure() >= first + 50_000 and tree.walks == 2
    # A directory changed during the walk's own seconds is not trusted: walked again.
    assert tree.measure() and tree.walks == 3
    old_mtimes(root)
    tree.measure()
    walks = tree.walks
    # A removed directory (so a changed parent) too; and an old tree anyway.
    (root / "odoo" / "ab" / "x").unlink()
    (root / "odoo" / "ab" / "y").unlink()
    (root / "odoo" / "ab").rmdir()
    assert tree.measure() < first and tree.walks == walks + 1
    old_mtimes(root)
    tree.measure()
    tree.walked_at -= disk_walk.FULL_WALK_S + 1
    tree.measure()
    assert tree.walks == walks + 3


def test_meter_finds_environment_directories(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    env = tmp_path / ENV_ID
    (env / "filestore").mkdir(parents=True)
    (env / "filestore" / "f").write_bytes(os.urandom(70_000))
    (tmp_path / "not-an-environment").mkdir()
    [figures] = DiskMeter(root=str(tmp_path)).measure()
    assert figures["environment_id"] == ENV_ID
    assert figures["filestore_bytes"] >= 70_000
    assert figures["addons_bytes"] is None  # no such directory yet
    assert figures["database_bytes"] is None  # no engine: not measured
    assert figures["measured_at_unix_ms"] > 0


@pytest.mark.parametrize("raw, expected", [(None, 900), ("", 900), ("60", 60.0),
                                           ("0", 1.0), ("soon", 900)])
def test_interval_setting(monkeypatch, raw, expected):
    if raw is None:
        monkeypatch.delenv("BERTH_AGENT_DISK_INTERVAL_SECONDS", raising=False)
    else:
        monkeypatch.setenv("BERTH_AGENT_DISK_INTERVAL_SECONDS", raw)
    assert disk.interval_seconds() == expected


def test_database_figure_from_the_running_container_kept_while_stopped(
        tmp_path, labeled_container, postgres_image):
    """A real PostgreSQL container with the agent's labels: its database's size,
    kept while it is stopped (it cannot grow), gone with the container."""
    env_id = str(uuid.uuid4())
    db = labeled_container(env_id, "postgres", None, image=postgres_image,
                           environment={"POSTGRES_USER": "odoo", "POSTGRES_PASSWORD": "x",
                                        "POSTGRES_DB": "odoo"})
    meter = DiskMeter(root=str(tmp_path))

    def figure():
        return next((f["database_bytes"] for f in meter.measure()
                     if f["environment_id"] == env_id), None)

    size = wait_for(figure, timeout=60, interval=0.5, what="the database's size")
    assert 1_000_000 < size < 100_000_000
    db.stop(timeout=10)
    assert figure() == size
    db.remove(force=True, v=True)
    assert all(f["environment_id"] != env_id for f in meter.measure())
