"""The data dir (SQLite database, its -wal/-shm, the secret key, the wheelhouse) is
owner-only: a real `berth serve` / `berth migrate` under the usual 022 umask."""

import os
import sqlite3
import stat
import subprocess

import pytest
import requests

from tests.support.serve import BERTH, Served


@pytest.fixture
def umask_022():
    old = os.umask(0o022)  # children inherit it: what a login shell has
    yield
    os.umask(old)


def _modes(data):
    return {str(p.relative_to(data)) or ".": oct(stat.S_IMODE(p.stat().st_mode))
            for p in [data, *data.rglob("*")]}


def test_a_fresh_data_dir_is_owner_only(tmp_path, umask_022):
    data = tmp_path / "data"
    served = Served(data, {"CP_DATABASE_URL": ""})
    (data / "serve.log").unlink(missing_ok=True)
    data.rmdir()  # `berth` makes the data dir itself
    served.log_path = tmp_path / "serve.log"
    served.start()
    try:
        assert requests.get(served.url + "/healthz", timeout=10).status_code == 200
        # A reader holds the database open, so the -wal/-shm files that the last
        # connection's close would remove stay to be looked at; `berth` writes.
        reader = sqlite3.connect(data / "berth.sqlite3")
        reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        served.admin("bootstrap")
        modes = _modes(data)
        reader.close()
        assert {"berth.sqlite3", "berth.sqlite3-wal", "berth.sqlite3-shm",
                "secret_key"} <= set(modes), modes
        assert modes == {name: "0o700" if name == "." else "0o600" for name in modes}
    finally:
        served.stop()


def test_an_existing_loose_data_dir_is_tightened_at_start(tmp_path, umask_022):
    data = tmp_path / "data"
    env = {**os.environ, "CP_DATA_DIR": str(data), "CP_DATABASE_URL": ""}
    subprocess.run([BERTH, "migrate"], env=env, check=True, capture_output=True)
    # As an install made before the rule left it.
    (data / "old.log").write_text("x")
    (data / "sub").mkdir()
    (data / "sub" / "file").write_text("x")
    for path in [data, data / "sub"]:
        path.chmod(0o755)
    for path in data.rglob("*"):
        if path.is_file():
            path.chmod(0o644)
    subprocess.run([BERTH, "migrate"], env=env, check=True, capture_output=True)
    modes = _modes(data)
    assert modes == {name: "0o700" if name in (".", "sub") else "0o600" for name in modes}


def test_a_file_gone_while_the_data_dir_is_tightened_does_not_stop_the_start(tmp_path,
                                                                               monkeypatch):
    """Another process's last SQLite connection removes -wal/-shm when it closes: a
    name listed at start may be gone a moment later (seen once, failing a start).
    The listing is made to name such a file, as the race would: the start goes on."""
    from control_plane.app import create_app
    from control_plane.infra import config

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "kept.log").write_text("x")
    (data / "kept.log").chmod(0o644)
    listed = os.walk

    def walk(top, *args, **kwargs):
        for root, dirs, files in listed(top, *args, **kwargs):
            yield root, dirs, [*files, "berth.sqlite3-shm"]  # closed and removed since

    monkeypatch.setattr(config.os, "walk", walk)
    create_app({"DATA_DIR": str(data), "DATABASE_URL": ""})
    assert oct(stat.S_IMODE((data / "kept.log").stat().st_mode)) == "0o600"
