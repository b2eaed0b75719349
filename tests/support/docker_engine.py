"""Fixtures for tests that run real containers on the local Docker engine.

`make test` starts the engine (scripts/start-dockerd.sh) and builds the test
image from Debian packages (scripts/build-test-images.sh); no registry is
used. Without an engine or the image these fixtures fail the test, loudly:
a Docker test is never skipped."""

import contextlib
import socket
import threading
import uuid

import docker
import pytest

TEST_IMAGE = "berth-test-base:latest"
ENV_LABEL, ROLE_LABEL = "berth.environment_id", "berth.role"
HOW_TO = ("start it with scripts/start-dockerd.sh and build the image with "
          "scripts/build-test-images.sh (`make test` does both)")


@pytest.fixture(scope="session")
def docker_client():
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:
        pytest.fail(f"the Docker engine is not reachable ({exc}); {HOW_TO}", pytrace=False)
    yield client
    client.close()


@pytest.fixture(scope="session")
def test_image(docker_client):
    try:
        docker_client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"the test image {TEST_IMAGE} is missing; {HOW_TO}", pytrace=False)
    return TEST_IMAGE


# Local stand-ins for CP_POSTGRES_IMAGE (`postgres:16`) and CP_ERP_IMAGE (`odoo:<version>`),
# built by scripts/build-test-images.sh from images/postgres and images/erp: the same
# environment variables, config file, volumes, ports, users and entry points.
POSTGRES_IMAGE = "berth-test-postgres:latest"
ERP_IMAGE = "berth-test-erp:latest"


def _require_image(client, image):
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.fail(f"the test image {image} is missing; {HOW_TO}", pytrace=False)
    return image


@pytest.fixture(scope="session")
def postgres_image(docker_client):
    """PostgreSQL (Debian's 15) honouring the official postgres image's POSTGRES_USER,
    POSTGRES_PASSWORD, POSTGRES_DB, PGDATA and /docker-entrypoint-initdb.d."""
    return _require_image(docker_client, POSTGRES_IMAGE)


@pytest.fixture(scope="session")
def erp_image(docker_client):
    """The ERP stand-in: reads /etc/odoo/odoo.conf (and HOST/PORT/USER/PASSWORD) like
    the official odoo image, serves 8069 (/web/health, /berth/addons, /berth/info)."""
    return _require_image(docker_client, ERP_IMAGE)


class LabeledContainers:
    """Starts containers carrying the agent's labels; removes them all at the end."""

    def __init__(self, client, image):
        self.client, self.image, self.started = client, image, []

    def __call__(self, environment_id, role, command, **kwargs):
        """A started (detached) container; `kwargs` go to `containers.run`."""
        labels = {**kwargs.pop("labels", {}), ENV_LABEL: str(environment_id), ROLE_LABEL: role}
        kwargs.setdefault("name", f"berth-test-{role}-{uuid.uuid4().hex[:12]}")
        container = self.client.containers.run(kwargs.pop("image", self.image), command,
                                               detach=True, labels=labels, **kwargs)
        self.started.append(container)
        return container

    def remove_all(self):
        for container in self.started:
            try:
                container.remove(force=True, v=True)
            except docker.errors.NotFound:
                pass
        self.started.clear()


@pytest.fixture
def labeled_container(docker_client, test_image):
    """Factory: labeled_container(environment_id, role, command, **run_kwargs)."""
    containers = LabeledContainers(docker_client, test_image)
    yield containers
    containers.remove_all()


@pytest.fixture(scope="module")
def module_labeled_container(docker_client, test_image):
    """The same factory, for containers a whole test module shares."""
    containers = LabeledContainers(docker_client, test_image)
    yield containers
    containers.remove_all()


@contextlib.contextmanager
def silent_engine(path):
    """A fake engine: a unix socket that accepts connections and never answers
    (a hung engine cannot be made to order from a real one). Yields its URL."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(16)
    held = []

    def hold():
        try:
            while True:
                held.append(server.accept())
        except OSError:
            pass

    threading.Thread(target=hold, daemon=True).start()
    try:
        yield f"unix://{path}"
    finally:
        server.close()
        for conn, _ in held:
            conn.close()
