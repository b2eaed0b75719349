"""Add-ons' Python requirements, end to end (the stand of tests/support/backup_flow.py
on local storage: a real control plane over HTTP, a real `berth-agent run`, real
containers). No package index is reachable here, so the ERP image the environment
runs is the stand-in with a local one its pip is configured for (`PIP_NO_INDEX`,
`PIP_FIND_LINKS`), holding one wheel made by this test: that is how a server
without registry access installs requirements.

The project's `requirements.txt` names the library: after the deploy the ERP
imports it. A redeploy with the same requirements reuses the environment's image.
A requirement pip cannot find fails the deploy with pip's own message before
anything stops: the same ERP container still serves, the environment `running`."""

import base64
import hashlib
import io
import subprocess
import zipfile

import pytest

from tests.support.backup_flow import P, deployed, redeploy, task_log, wait_running

WHEEL = "berth_hello-1.0-py3-none-any.whl"


def _wheel():
    """A pure-Python wheel of `berth_hello` (VALUE = "hello"), written by hand."""
    files = {"berth_hello/__init__.py": b'VALUE = "hello"\n',
             "berth_hello-1.0.dist-info/METADATA":
                 b"Metadata-Version: 2.1\nName: berth-hello\nVersion: 1.0\n",
             "berth_hello-1.0.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: berth-tests\nRoot-Is-Purelib: true\n"
                 b"Tag: py3-none-any\n"}
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()) + "berth_hello-1.0.dist-info/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("berth_hello-1.0.dist-info/RECORD", record)
    return out.getvalue()


@pytest.fixture(scope="module")
def erp_with_local_index(docker_client, erp_image, tmp_path_factory):
    data = _wheel()
    tag = f"berth-test-erp-wheels:{hashlib.sha256(data + erp_image.encode()).hexdigest()[:12]}"
    context = tmp_path_factory.mktemp("wheels")
    (context / WHEEL).write_bytes(data)
    (context / "Dockerfile").write_text(
        f"FROM {erp_image}\nUSER root\nCOPY {WHEEL} /opt/wheels/\n"
        "ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/opt/wheels\nUSER odoo\n")
    docker_client.images.build(path=str(context), tag=tag, rm=True)
    yield tag


def push(tmp_path, requirements, message):
    work = tmp_path / "work"
    (work / "requirements.txt").write_text(requirements)
    git = ["git", "-c", "user.email=d@example.com", "-c", "user.name=d"]
    for cmd in ([*git, "add", "-A"], [*git, "commit", "-qm", message],
                ["git", "push", "-q", str(tmp_path / "repo.git"), "main"]):
        subprocess.run(cmd, cwd=work, check=True)




@pytest.mark.parametrize("stand", ["local"], indirect=True)
def test_requirements_are_installed_for_the_erp(client, stand, tmp_path, erp_with_local_index):
    s = stand
    s.settings["ERP_IMAGE"] = erp_with_local_index
    push(tmp_path, "berth_hello\n", "needs berth_hello")
    env_id = deployed(client, s, "Shop")
    wait_running(client, s, env_id)
    erp = s.envs._container(s.envs._names(env_id)["erp"])
    code, out = erp.exec_run(["python3", "-c", "import berth_hello; print(berth_hello.VALUE)"])
    assert (code, out.decode().strip()) == (0, "hello")
    assert erp.image.tags[0].startswith("berth-erp-")
    task = client.get(f"{P}/environments/{env_id}/status", headers=s.reader).json[
        "last_deploy"]["id"]
    log = task_log(client, s, env_id, task)
    assert "Successfully installed berth_hello-1.0" in log and "\x1b" not in log

    # The same requirements: the environment's image is reused.
    done = redeploy(client, s, env_id)
    assert done["status"] == "success", done
    assert "are unchanged: image berth-erp-" in task_log(client, s, env_id, done["id"])
    erp = s.envs._container(s.envs._names(env_id)["erp"])
    assert erp.exec_run(["python3", "-c", "import berth_hello"])[0] == 0

    # One pip cannot find: the deploy fails with pip's message, nothing was stopped.
    push(tmp_path, "berth_hello\nno_such_library==9.9\n", "needs more")
    done = redeploy(client, s, env_id)
    assert done["status"] == "failed", done
    assert "could not be installed (nothing was stopped)" in done["error_message"]
    assert "no_such_library" in done["error_message"], done["error_message"]
    assert "No matching distribution" in task_log(client, s, env_id, done["id"])
    same = s.envs._container(s.envs._names(env_id)["erp"])
    assert same.id == erp.id and same.status == "running"
    assert client.get(f"{P}/environments/{env_id}", headers=s.reader).json["status"] == \
        "running"
    req = (s.root / env_id / "addons" / "requirements.txt").read_text()
    assert req == "berth_hello\n"  # the code on disk is the one that runs

    # A destroy removes the environment's images with it.
    images = s.envs.docker.images.list(filters={"label": f"berth.environment_id={env_id}"})
    assert images
    s.envs.destroy(env_id, True, lambda *a: None)
    assert not s.envs.docker.images.list(filters={"label": f"berth.environment_id={env_id}"})
