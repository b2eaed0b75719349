"""The agent's environment operations against the real engine, with the local
ERP and PostgreSQL images and a Git repository the test creates."""

import json
import urllib.request
import uuid

import pytest

from agent.deploy.environments import DeployError, Environments
from tests.support.git_repo import Repo


@pytest.fixture
def repo(tmp_path):
    """A bare repository with one add-on, and a helper to commit a new version."""
    addons = Repo(tmp_path, "addons")

    def commit(version):
        return addons.commit({"shop_extras": version}, f"version {version}")

    commit.url = addons.url
    return commit


@pytest.fixture
def envs(docker_client, tmp_path):
    e = Environments(docker_client, root=tmp_path / "srv", health_timeout=60)
    created = []
    yield e, created
    for env_id in created:
        e.destroy(env_id, True, lambda *a: None)


def spec(env_id, erp_image, postgres_image, url, **extra):
    return {"environment_id": env_id, "erp_image": erp_image, "postgres_image": postgres_image,
            "cpu_cores": 1, "ram_mb": 512, "git": {"url": url, "branch": "main"}, **extra}


def get(address, path):
    """The ERP at its address on its network (it publishes no port)."""
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
        return r.status, json.loads(r.read() or b"null")


def addons(address):
    return [(a["name"], a["version"]) for a in get(address, "/berth/addons")[1]["addons"]]


def labeled(docker_client, env_id):
    label = f"berth.environment_id={env_id}"
    return (docker_client.containers.list(all=True, filters={"label": label}),
            docker_client.volumes.list(filters={"label": label}),
            docker_client.networks.list(filters={"label": label}))


def test_deploy_redeploy_rollback_stop_start_destroy(envs, repo, docker_client, erp_image,
                                                     postgres_image, tmp_path):
    e, created = envs
    env_id = str(uuid.uuid4())
    created.append(env_id)
    first = repo("1.0")
    lines = []
    result = e.deploy(spec(env_id, erp_image, postgres_image, repo.url),
                      lambda level, msg: lines.append((level, msg)))
    assert result["git_commit"] == first and result["image_tag"] == erp_image
    assert (result["git_message"], result["git_author"]) == ("version 1.0", "d")
    assert get(result["erp_address"], "/web/health")[0] == 200
    assert addons(result["erp_address"]) == [("shop_extras", "1.0")]
    assert any("health" in msg for _, msg in lines) and all(lvl == "info" for lvl, _ in lines)
    containers, volumes, networks = labeled(docker_client, env_id)
    assert {c.labels["berth.role"] for c in containers} == {"erp", "postgres"}
    assert len(volumes) == 1 and len(networks) == 1
    erp = next(c for c in containers if c.labels["berth.role"] == "erp")
    assert erp.attrs["HostConfig"]["Memory"] == 512 * 1024 * 1024
    assert erp.attrs["HostConfig"]["NanoCpus"] == 1_000_000_000

    second = repo("2.0")
    again = e.deploy(spec(env_id, erp_image, postgres_image, repo.url), lambda *a: None)
    assert again["git_commit"] == second
    assert addons(again["erp_address"]) == [("shop_extras", "2.0")]
    assert again["db_container"] == result["db_container"]  # the database stays

    back = e.deploy(spec(env_id, erp_image, postgres_image, repo.url,
                         git={"url": repo.url, "branch": "main", "commit": first}),
                    lambda *a: None)
    assert back["git_commit"] == first and back["git_message"] == "version 1.0"
    assert addons(back["erp_address"]) == [("shop_extras", "1.0")]

    e.stop(env_id, lambda *a: None)
    assert {c.status for c in labeled(docker_client, env_id)[0]} == {"exited"}
    e.start(env_id, lambda *a: None)
    e._wait_http(docker_client.containers.get(back["erp_container"]), lambda *a: None)

    env_dir = tmp_path / "srv" / env_id
    out = e.destroy(env_id, False, lambda *a: None)
    assert out == {"deleted_containers": 2, "deleted_database": True, "deleted_data": False}
    assert labeled(docker_client, env_id) == ([], [], [])
    assert (env_dir / "addons" / "shop_extras").exists() and not (env_dir / "odoo.conf").exists()
    e.destroy(env_id, True, lambda *a: None)
    assert not env_dir.exists()


def test_bad_branch_fails_readably_and_a_retry_works(envs, repo, erp_image, postgres_image):
    e, created = envs
    env_id = str(uuid.uuid4())
    created.append(env_id)
    repo("1.0")
    with pytest.raises(DeployError, match="cloning the repository failed"):
        e.deploy(spec(env_id, erp_image, postgres_image, repo.url,
                      git={"url": repo.url, "branch": "no-such-branch"}), lambda *a: None)
    result = e.deploy(spec(env_id, erp_image, postgres_image, repo.url), lambda *a: None)
    assert get(result["erp_address"], "/web/health")[0] == 200


def test_missing_image_and_unreachable_repository(envs, repo, erp_image, postgres_image):
    e, created = envs
    env_id = str(uuid.uuid4())
    created.append(env_id)
    with pytest.raises(DeployError, match="the image berth-no-such-image:1 is not on this "
                                          "server and could not be pulled"):
        e.deploy(spec(env_id, "berth-no-such-image:1", postgres_image, None), lambda *a: None)
    with pytest.raises(DeployError, match="cloning"):
        e.deploy(spec(env_id, erp_image, postgres_image, "file:///nonexistent/repo.git"),
                 lambda *a: None)
