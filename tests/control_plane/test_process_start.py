"""Scale-out processes of a new version take work only once `berth migrate` has
brought the schema to them: before that they wait, and say why."""

import os
import re
import subprocess
import time

import pytest
import requests

from tests.support.serve import BERTH
from tests.support.services import free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def _wait_text(path, pattern, proc, timeout=30):
    def written():
        m = re.search(pattern, path.read_text())
        assert m or proc.poll() is None, path.read_text()  # exited without saying it
        return m

    return wait_for(written, timeout=timeout, interval=0.1, what=f"{pattern!r} in {path.name}",
                    detail=path.read_text)


def test_web_waits_for_migrate_then_serves(tmp_path):
    env = {**os.environ, "CP_DATA_DIR": str(tmp_path / "data"), "CP_WHEELHOUSE_AUTO_BUILD": "0"}
    port = free_port()
    log_path = tmp_path / "web.log"
    with open(log_path, "w") as log:
        web = subprocess.Popen([BERTH, "web", "--http", f"127.0.0.1:{port}"], env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_text(log_path, r"waiting for `berth migrate` \(0001", web)
        time.sleep(1.5)
        with pytest.raises(requests.ConnectionError):  # no traffic taken meanwhile
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        subprocess.run([BERTH, "migrate"], env=env, check=True, capture_output=True)
        _wait_text(log_path, r"listening on http://", web)
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        web.terminate()
        web.wait(15)


def test_a_schema_that_never_arrives_is_an_error_not_a_hang(tmp_path):
    env = {**os.environ, "CP_DATA_DIR": str(tmp_path / "data"), "CP_MIGRATION_WAIT_SECONDS": "2"}
    r = subprocess.run([BERTH, "scheduler"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "the database schema is not current after 2 s (run `berth migrate`)" in r.stderr
    assert "Traceback" not in r.stderr


def test_migrate_without_a_database_is_one_line_not_a_traceback(tmp_path):
    port = free_port()  # nothing listens there
    env = {**os.environ, "CP_DATA_DIR": str(tmp_path / "data"),
           "CP_DATABASE_URL": f"postgresql://berth:pw@127.0.0.1:{port}/berth"}
    r = subprocess.run([BERTH, "migrate"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "cannot reach the database" in r.stderr and "Traceback" not in r.stderr
    assert "pw@" not in r.stderr  # the password is not repeated


@pytest.mark.parametrize("setting, value, said", [
    ("CP_GROWTH_ALERT_MB_PER_DAY", "-1", "CP_GROWTH_ALERT_MB_PER_DAY must be a whole number"),
    ("CP_ALERT_HOLD_SECONDS", "0", "CP_ALERT_HOLD_SECONDS must be a positive integer"),
    ("CP_ALERT_HOLD_SECONDS", "soon", "CP_ALERT_HOLD_SECONDS: expected a whole number, got 'soon'")])
def test_a_setting_out_of_its_range_is_refused_in_one_line(tmp_path, setting, value, said):
    env = {**os.environ, "CP_DATA_DIR": str(tmp_path / "data"), setting: value}
    r = subprocess.run([BERTH, "migrate"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and said in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
