import datetime as dt
import itertools
import os
import shutil
import uuid
from pathlib import Path

import pytest

from control_plane.app import create_app
from control_plane.infra import clock, migrate
from control_plane.models import ALL_MODELS
from tests.support.services import MotoS3, Postgres, Redis
from tests.support.wheelhouse import agent_wheelhouse  # noqa: F401 (a session fixture)

# The tests' repositories are local bare ones, cloned over file://, which an agent
# refuses unless told otherwise (agents started by tests inherit this).
os.environ["BERTH_AGENT_GIT_PROTOCOLS"] = "https:ssh:file"

pytest_plugins = ["tests.support.docker_engine", "tests.support.agents", "tests.support.backup_flow",
                  "tests.support.proxy", "tests.support.workers"]


def pytest_addoption(parser):
    parser.addoption("--backend", action="append", choices=["sqlite", "postgres"],
                     help="database backends to run on (default: both)")
    parser.addoption("--fast", action="store_true",
                     help="the everyday lane (make test-fast): no containers, no agent "
                          "processes, no long flows")


# What the fast lane leaves out: the end-to-end flows (tests/e2e/), tests marked slow,
# and those that need the Docker engine, its images or agent processes (a fixture of
# these, directly or not).
E2E = Path(__file__).parent / "e2e"
NOT_FAST = frozenset({"docker_client", "test_image", "erp_image", "postgres_image",
                      "proxy_image", "labeled_container", "module_labeled_container",
                      "agents", "agent_wheelhouse", "pebble", "proxied", "stand"})


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--fast"):
        return
    kept, left = [], []
    for item in items:
        needs = set(getattr(item, "fixturenames", ()))
        out = (item.get_closest_marker("slow") or needs & NOT_FAST
               or item.path.is_relative_to(E2E))
        (left if out else kept).append(item)
    items[:] = kept
    config.hook.pytest_deselected(items=left)


@pytest.fixture(scope="session")
def postgres():
    pg = Postgres().start()
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def redis_server():
    r = Redis()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def moto_s3():
    s3 = MotoS3()
    yield s3
    s3.stop()


@pytest.fixture(scope="session")
def loopback_dns():
    from tests.support.dns_server import LoopbackDNS

    dns = LoopbackDNS()
    yield dns
    dns.stop()


@pytest.fixture(scope="session")
def pg_url(postgres):
    """One migrated database for the session; each test truncates it."""
    url = postgres.create_database("berth_test")
    app = create_app({"DATABASE_URL": url, "DATA_DIR": postgres.dir + "/cp",
                      "SECRET_KEY": "test"})
    migrate.upgrade(app.extensions["berth"].db)
    return url


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--backend") or ["sqlite", "postgres"]
        # @pytest.mark.backends("sqlite"): a flow whose database part another test runs
        # on both runs once (on the first chosen backend when its own is not chosen).
        only = metafunc.definition.get_closest_marker("backends")
        if only is not None:
            chosen = [b for b in chosen if b in only.args] or chosen[:1]
        metafunc.parametrize("backend", chosen, scope="function")


class FakeClock:
    """Controllable clock for expiry rules: starts at the real time, moves on request."""

    def __init__(self):
        self.now = dt.datetime.now(dt.UTC).replace(tzinfo=None)

    def __call__(self):
        return self.now

    def advance(self, **kwargs):
        self.now += dt.timedelta(**kwargs)


@pytest.fixture
def fake_clock():
    c = FakeClock()
    clock.set_source(c)
    yield c
    clock.set_source(None)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory):
    """A migrated SQLite database, copied for each test: running the migrations for
    each of a thousand tests cost minutes of CPU, a copy a millisecond."""
    data = tmp_path_factory.mktemp("sqlite-template")
    app = create_app({"DATA_DIR": str(data), "SECRET_KEY": "test-secret", "PROXY_IMAGE": ""})
    db = app.extensions["berth"].db
    migrate.upgrade(db)
    db.close()
    assert not (data / "berth.sqlite3-wal").exists()  # all of it in the one file
    return data / "berth.sqlite3"


@pytest.fixture
def app(request, tmp_path, backend):
    # No proxy unless a test runs one (tests/support/proxy.py): PROXY_IMAGE "".
    data = tmp_path / "data"
    settings = {"DATA_DIR": str(data), "SECRET_KEY": "test-secret", "PROXY_IMAGE": ""}
    if backend == "postgres":
        url = request.getfixturevalue("pg_url")
        settings["DATABASE_URL"] = url
    else:
        data.mkdir()
        shutil.copyfile(request.getfixturevalue("sqlite_template"), data / "berth.sqlite3")
    application = create_app(settings)
    db = application.extensions["berth"].db
    if backend == "postgres":
        tables = ", ".join(f'"{m._meta.table_name}"' for m in ALL_MODELS)
        db.execute_sql(f"TRUNCATE {tables} CASCADE")
    yield application
    db.close_all() if hasattr(db, "close_all") else db.close()


@pytest.fixture
def client(app):
    return app.test_client()


_seq = itertools.count()


class World:
    """Arranges data through the services an operator's commands use."""

    def __init__(self, app):
        self.app = app

    def org(self, name=None, quota=10):
        from control_plane.services.accounts import orgs
        return orgs.create_org(name or f"org-{next(_seq)}", quota)

    def user(self, org, permissions=()):
        from control_plane.services.accounts import orgs
        n = next(_seq)
        return orgs.create_user(org.id, f"user{n}", f"user{n}@example.com", permissions)

    def key(self, org, key_type="full_access", scope="organization", project=None, **kw):
        from control_plane.services.accounts import keys
        key, raw = keys.create_key(org.id, f"key-{next(_seq)}", key_type, scope,
                                   project.id if project else None, **kw)
        return raw, key

    def server(self, org=None, name=None):
        from control_plane.services.servers import servers
        return servers.create_server(name=name or f"srv-{next(_seq)}", provider="hetzner",
                                     cpu_cores=4, ram_mb=8192, disk_gb=100,
                                     org_id=org.id if org else None)

    def project(self, org, server=None, name=None):
        from control_plane.models import Project
        server = server or self.server(org)
        return Project.create(organization=org, name=name or f"proj-{next(_seq)}", server=server,
                              default_branch="main")

    def environment(self, project, status="running", server=None, active=True):
        from control_plane.models import Environment
        return Environment.create(project=project, name=f"env-{next(_seq)}", status=status,
                                  server=server or project.server, is_active=active)


@pytest.fixture
def world(app):
    return World(app)


def auth(raw, header="bearer"):
    return {"Authorization": f"Bearer {raw}"} if header == "bearer" else {"X-API-Key": raw}


def new_uuid():
    return str(uuid.uuid4())

