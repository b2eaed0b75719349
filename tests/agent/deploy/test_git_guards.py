"""The agent's git guards (agent/deploy/git.py) through deploys on the real engine:
local repositories are not cloned unless the server allows the file transport,
URLs and branches that git would read as options are refused before git runs, and
repository credentials appear in no log line and no error."""

import uuid

import pytest

from agent.deploy.environments import DeployError, Environments
from tests.support.git_repo import Repo


@pytest.fixture
def bare(tmp_path):
    """A repository on this server's disk, as another environment's checkout is."""
    repo = Repo(tmp_path, "other-env")
    repo.commit({"secret_module": "1.0"})
    return repo.bare


@pytest.fixture
def deploy(docker_client, erp_image, postgres_image, tmp_path):
    """Deploys one environment with the given git and add-on repositories; returns
    the log lines, and the DeployError if it failed."""
    e = Environments(docker_client, root=tmp_path / "srv", health_timeout=60)
    env_id = str(uuid.uuid4())

    def run(git_spec=None, addon_repositories=None):
        lines = []
        spec = {"environment_id": env_id, "erp_image": erp_image,
                "postgres_image": postgres_image, "cpu_cores": 1, "ram_mb": 512,
                "git": git_spec, "addon_repositories": addon_repositories or []}
        try:
            e.deploy(spec, lambda level, message: lines.append(message))
        except DeployError as exc:
            return lines, exc
        return lines, None

    run.checkout = tmp_path / "srv" / env_id / "addons"
    yield run
    e.destroy(env_id, True, lambda *a: None)


def test_local_repositories_are_not_cloned_by_default(deploy, bare, monkeypatch):
    monkeypatch.delenv("BERTH_AGENT_GIT_PROTOCOLS")
    for url in (f"file://{bare}", str(bare)):
        _, error = deploy({"url": url, "branch": "main"})
        assert error is not None and "not allowed" in str(error), (url, error)
        _, error = deploy(None, [{"name": "x", "url": url, "branch": "main"}])
        assert error is not None and "not allowed" in str(error), (url, error)
    assert not list(deploy.checkout.rglob("secret_module"))
    # A server that mirrors its repositories locally may allow the file transport.
    monkeypatch.setenv("BERTH_AGENT_GIT_PROTOCOLS", "https:ssh:file")
    _, error = deploy(None, [{"name": "x", "url": f"file://{bare}", "branch": "main"}])
    assert "not allowed" not in str(error)  # cloned; the ERP is what fails (no project code)
    assert list(deploy.checkout.rglob("secret_module"))


def test_options_in_place_of_a_url_or_branch_are_refused(deploy, bare, tmp_path):
    marker = tmp_path / "pwned"
    for git_spec in ({"url": f"--upload-pack=touch {marker}", "branch": "main"},
                     {"url": f"file://{bare}", "branch": f"--upload-pack=touch {marker}"},
                     {"url": f"ext::sh -c touch% {marker}", "branch": "main"}):
        lines, error = deploy(git_spec)
        assert error is not None, git_spec
        assert ("not a valid URL or branch" in str(error) or "not allowed" in str(error)), error
    assert not marker.exists()


def test_repository_credentials_are_in_no_log_line_and_no_error(deploy):
    url = "https://deploy:s3cr3t-t0ken@127.0.0.1:9/acme/erp.git"  # nothing listens on 9
    for git_spec, addons in (({"url": url, "branch": "main"}, None),
                             (None, [{"name": "acme-tools", "url": url, "branch": "main"}])):
        lines, error = deploy(git_spec, addons)
        assert error is not None
        assert "s3cr3t" not in str(error) and not [ln for ln in lines if "s3cr3t" in ln]
        assert any("https://127.0.0.1:9/acme/erp.git" in ln for ln in lines), lines
