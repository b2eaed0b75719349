"""Add-on repositories: the agent checks each one out at its branch next to the
project's code, and the ERP's addons_path lists them (real Git repositories)."""

import json
import urllib.request
import uuid

import pytest

from agent.deploy import checkout
from agent.deploy.environments import DeployError, Environments, addon_repo_names, addons_path
from tests.support.git_repo import Repo


def make_repo(tmp_path, name, modules, branch="main"):
    """A bare repository whose branch holds one directory per add-on module."""
    repo = Repo(tmp_path, name, work=f"{name}-work", branch=branch)
    repo.commit(dict.fromkeys(modules, "1.0"), "add-ons")
    return repo.url


def test_each_addon_repository_is_checked_out_at_its_branch(tmp_path):
    web = make_repo(tmp_path, "web", ["web_responsive"], branch="17.0")
    tools = make_repo(tmp_path, "tools", ["base_tools"])
    addons = tmp_path / "env" / "addons"
    (addons / "project_module").mkdir(parents=True)  # the project's own checkout
    repos = [{"name": "oca-web", "url": web, "branch": "17.0"},
             {"name": "acme-tools", "url": tools, "branch": "main"}]
    lines = []
    checkout.addon_repositories(repos, addons, lambda level, msg: lines.append(msg))
    base = addons / ".addon-repositories"
    assert (base / "oca-web" / "web_responsive" / "__manifest__.py").exists()
    assert (base / "acme-tools" / "base_tools" / "__manifest__.py").exists()
    assert (addons / "project_module").exists()  # next to the project's code
    assert any(web in m and "17.0" in m for m in lines)
    assert addons_path({"addon_repositories": repos}) == (
        "/mnt/extra-addons,/mnt/extra-addons/.addon-repositories/oca-web,"
        "/mnt/extra-addons/.addon-repositories/acme-tools")

    # The next deploy makes the set afresh: a repository no longer listed goes away.
    checkout.addon_repositories(repos[:1], addons, lambda *a: None)
    assert sorted(p.name for p in base.iterdir()) == ["oca-web"]
    checkout.addon_repositories([], addons, lambda *a: None)
    assert not base.exists() and addons_path({}) == "/mnt/extra-addons"

    with pytest.raises(DeployError, match="cloning the add-on repository oca-web"):
        checkout.addon_repositories([{**repos[0], "branch": "no-such-branch"}], addons,
                                       lambda *a: None)
    with pytest.raises(DeployError):
        checkout.addon_repositories([{"name": "x", "url": "--upload-pack=touch /tmp/x"}],
                                       addons, lambda *a: None)


def test_directory_names_are_safe_and_unique():
    assert addon_repo_names([{"name": "../../etc"}, {"name": "a/b"}, {"name": "a/b"},
                             {"url": "https://example.com/x.git"}, {"name": "..."}]) == [
        "etc", "a-b", "a-b-2", "repository-4", "repository-5"]


def test_deployed_erp_finds_the_addon_repositories(docker_client, erp_image, postgres_image,
                                                   tmp_path):
    project = make_repo(tmp_path, "project", ["shop_extras"])
    web = make_repo(tmp_path, "web", ["web_responsive"], branch="17.0")
    e = Environments(docker_client, root=tmp_path / "srv", health_timeout=60)
    env_id = str(uuid.uuid4())
    try:
        result = e.deploy({"environment_id": env_id, "erp_image": erp_image,
                           "postgres_image": postgres_image, "cpu_cores": 1, "ram_mb": 512,
                           "git": {"url": project, "branch": "main"},
                           "addon_repositories": [{"name": "oca-web", "url": web,
                                                   "branch": "17.0"}]}, lambda *a: None)
        url = f"http://{result['erp_address']}/berth/addons"
        with urllib.request.urlopen(url, timeout=10) as r:
            found = {a["name"] for a in json.loads(r.read())["addons"]}
        assert {"shop_extras", "web_responsive"} <= found
    finally:
        e.destroy(env_id, True, lambda *a: None)
