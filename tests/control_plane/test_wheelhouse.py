"""The agent wheelhouse on a fresh control plane: a real `berth serve` builds it in
the background at start (serving meanwhile), explains a 503 while it builds or when
the build failed, and the installer script shows that explanation. `berth
wheelhouse` fails with a message, not a traceback."""

import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import psutil
import pytest
import requests

from control_plane import __version__
from tests.support.serve import BERTH, Served
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

WHEELHOUSE = "/agent/wheelhouse.tar"
AUTO = {"CP_WHEELHOUSE_AUTO_BUILD": "1"}  # the default; tests/support/serve.py turns it off


def _offline_pip(tmp_path):
    """pip finds no package anywhere: the build of the agent's dependencies fails."""
    empty = tmp_path / "no-wheels"
    empty.mkdir(exist_ok=True)
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty), "PIP_NO_CACHE_DIR": "1"}


def _first_answer(url, predicate, what, timeout=240):
    """The first answer at `url` that `predicate` accepts."""
    last = []

    def accepted():
        last[:] = [requests.get(url, timeout=30)]
        return last if predicate(last[0]) else None  # (in a list: a 503 response is falsy)

    [r] = wait_for(accepted, timeout=timeout, interval=0.5, what=what,
                   detail=lambda: f"{last[0].status_code} {last[0].text[:500]}")
    return r


def test_a_fresh_serve_builds_the_wheelhouse_without_a_manual_step(tmp_path):
    served = Served(tmp_path / "data", AUTO).start()
    try:
        first = requests.get(served.url + WHEELHOUSE, timeout=30)
        if first.status_code != 200:  # still building: explained, and the API answers
            assert first.status_code == 503, first.text
            assert first.json()["error"] == "wheelhouse_building"
            assert "being built" in first.json()["message"]
            assert requests.get(served.url + "/healthz", timeout=5).status_code == 200
        r = _first_answer(served.url + WHEELHOUSE, lambda r: r.status_code == 200,
                          "the wheelhouse built")
    finally:
        log = served.stop()
    assert "agent wheelhouse ready" in log
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        names = tar.getnames()
        [berth] = [n for n in names if n.startswith("berth-")]
        wheel = zipfile.ZipFile(io.BytesIO(tar.extractfile(berth).read()))
    assert any(n.startswith("grpcio-") for n in names)
    assert "control_plane/agent_install/install.sh" in wheel.namelist()  # an installed wheel serves it
    assert oct((tmp_path / "data" / "wheelhouse.tar").stat().st_mode & 0o777) == "0o600"


def test_a_stale_wheelhouse_is_rebuilt_at_start(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with tarfile.open(data / "wheelhouse.tar", "w") as tar:
        tar.addfile(tarfile.TarInfo("berth-0.0.1-py3-none-any.whl"), io.BytesIO(b""))
    (data / "wheelhouse.json").write_text(json.dumps({"fingerprint": "older agent code"}))
    served = Served(data, AUTO).start()
    try:
        r = _first_answer(served.url + WHEELHOUSE, lambda r: r.status_code == 200,
                          "the wheelhouse rebuilt")
    finally:
        served.stop()
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        assert "berth-0.0.1-py3-none-any.whl" not in tar.getnames()
        assert any(n.startswith(f"berth-{__version__}-") for n in tar.getnames())


def test_a_failed_build_is_explained_and_the_installer_prints_it(tmp_path):
    served = Served(tmp_path / "data", {**AUTO, **_offline_pip(tmp_path)}).start()
    try:
        r = _first_answer(served.url + WHEELHOUSE,
                          lambda r: r.json()["error"] != "wheelhouse_building",
                          "the wheelhouse build to end")
        assert r.status_code == 503 and r.headers["Content-Type"] == "application/json"
        body = r.json()
        assert body["error"] == "wheelhouse_build_failed", body
        assert "pip wheel failed" in body["message"] and "grpcio" in body["message"]

        # The installer, as the install_command runs it, against this server.
        script = requests.get(served.url + "/install.sh", timeout=10).text
        (tmp_path / "install.sh").write_text(script)
        env = {**os.environ, "BERTH_TOKEN": "srt_live_" + "x" * 40,
               "BERTH_PREFIX": str(tmp_path / "opt"),
               "BERTH_BIN_LINK": str(tmp_path / "bin" / "berth-agent"),
               "BERTH_CONFIG_DIR": str(tmp_path / "etc"), "BERTH_DATA_DIR": str(tmp_path / "var"),
               "BERTH_ENV_ROOT": str(tmp_path / "srv")}
        run = subprocess.run(["sh", str(tmp_path / "install.sh")], env=env, capture_output=True,
                             text=True, timeout=120)
    finally:
        served.stop()
    assert run.returncode != 0
    assert "could not download the agent packages" in run.stderr
    assert "HTTP 503: The agent packages could not be built: pip wheel failed" in run.stderr
    assert "curl: (22)" not in run.stderr
    for path in ("opt", "etc", "var", "bin"):
        assert not (tmp_path / path).exists(), path


def test_berth_wheelhouse_fails_with_a_message_not_a_traceback(tmp_path):
    env = {**os.environ, "CP_DATA_DIR": str(tmp_path / "data"), **_offline_pip(tmp_path)}
    r = subprocess.run([BERTH, "wheelhouse"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1
    assert "cannot build the agent packages: pip wheel failed" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "data" / "wheelhouse.tar").exists()


def test_berth_wheelhouse_builds_where_setuptools_is_old_and_wheel_missing(tmp_path):
    """A plain `python -m venv` (Python 3.11's own setuptools 65, no wheel package)
    with Berth installed editable: the build falls back to pip's build isolation."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    have = subprocess.run([py, "-c", "import importlib.metadata as m\n"
                           "for n in ('setuptools', 'wheel'):\n"
                           "    try: print(n, m.version(n))\n"
                           "    except m.PackageNotFoundError: print(n, 'missing')"],
                          capture_output=True, text=True, check=True).stdout
    assert "wheel missing" in have and not any(
        line.split()[1] != "missing" and int(line.split()[1].split(".")[0]) >= 77
        for line in have.splitlines() if line.startswith("setuptools")), have
    root = Path(__file__).resolve().parents[2]
    subprocess.run([py, "-m", "pip", "install", "--quiet", "-e", f"{root}[server]"],
                   check=True, capture_output=True, timeout=600)
    env = {**os.environ, "CP_DATA_DIR": str(tmp_path / "data")}
    r = subprocess.run([str(venv / "bin" / "berth"), "wheelhouse"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    with tarfile.open(tmp_path / "data" / "wheelhouse.tar") as tar:
        assert any(n.startswith(f"berth-{__version__}-") for n in tar.getnames())


def test_stopping_serve_mid_build_ends_the_pip_run(tmp_path):
    served = Served(tmp_path / "data", AUTO).start()
    try:
        pips = wait_for(lambda: [p for p in psutil.Process(served.proc.pid).children()
                                 if "wheel" in p.cmdline()],
                        timeout=30, interval=0.1, what="a pip wheel run started")
    finally:
        served.stop()
    gone, alive = psutil.wait_procs(pips, timeout=0.5)  # killed, not left to finish
    assert not alive
