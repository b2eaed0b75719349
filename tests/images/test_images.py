"""The local PostgreSQL and ERP images behave like `postgres:16` and `odoo:<version>`
where deployment code relies on it: the ERP reads its odoo.conf, reaches PostgreSQL
over a user-defined network with a password, reports health and the deployed add-ons,
and the database lives in the named volume, across a new PostgreSQL container."""

import json
import urllib.error
import urllib.request
import uuid

import pytest

from tests.support.agents import wait_for

DB_USER, DB_PASSWORD, DB_NAME = "erp", "s3cret-pw", "erpdb"
ADDON, ADDON_VERSION = "berth_demo", "17.0.1.2.3"


def get(url, timeout=5):
    """(status, parsed JSON or text); (None, error) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            status, body = resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    except OSError as exc:
        return None, str(exc)
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


@pytest.fixture(scope="module")
def stack(docker_client, postgres_image, erp_image, module_labeled_container,
          tmp_path_factory):
    """PostgreSQL with a named volume and the ERP, on their own network."""
    env_id, suffix = uuid.uuid4(), uuid.uuid4().hex[:10]
    network = docker_client.networks.create(f"berth-test-net-{suffix}", driver="bridge",
                                            labels={"berth.environment_id": str(env_id)})
    volume = docker_client.volumes.create(f"berth-test-pgdata-{suffix}",
                                          labels={"berth.environment_id": str(env_id)})
    pg_name = f"berth-test-db-{suffix}"
    try:
        yield from _start(postgres_image, erp_image, module_labeled_container,
                          tmp_path_factory, env_id, network, volume, pg_name)
    finally:
        module_labeled_container.remove_all()
        network.remove()
        volume.remove(force=True)


def _start(postgres_image, erp_image, module_labeled_container, tmp_path_factory,
           env_id, network, volume, pg_name):

    def start_postgres():
        return module_labeled_container(
            env_id, "db", None, image=postgres_image, name=pg_name, network=network.name,
            environment={"POSTGRES_USER": DB_USER, "POSTGRES_PASSWORD": DB_PASSWORD,
                         "POSTGRES_DB": DB_NAME},
            volumes={volume.name: {"bind": "/var/lib/postgresql/data", "mode": "rw"}})

    files = tmp_path_factory.mktemp("erp")
    addon = files / "addons" / ADDON
    addon.mkdir(parents=True)
    (addon / "__init__.py").write_text("")
    (addon / "__manifest__.py").write_text(
        f"{{'name': 'Berth Demo', 'version': '{ADDON_VERSION}', 'depends': ['base']}}\n")
    (files / "addons" / "not_an_addon").mkdir()
    conf = files / "odoo.conf"
    conf.write_text(f"[options]\ndb_host = {pg_name}\ndb_port = 5432\ndb_user = {DB_USER}\n"
                    f"db_password = {DB_PASSWORD}\ndb_name = {DB_NAME}\n"
                    "addons_path = /mnt/extra-addons\ndata_dir = /var/lib/odoo\n"
                    "proxy_mode = True\n")
    for path in (files, files / "addons", addon, *addon.iterdir(), conf):
        path.chmod(0o755 if path.is_dir() else 0o644)  # the ERP runs as uid 101

    postgres = start_postgres()
    erp = module_labeled_container(
        env_id, "erp", None, image=erp_image, network=network.name,
        ports={"8069/tcp": ("127.0.0.1", None)},
        volumes={str(conf): {"bind": "/etc/odoo/odoo.conf", "mode": "ro"},
                 str(files / "addons"): {"bind": "/mnt/extra-addons", "mode": "ro"}})
    erp.reload()
    port = erp.attrs["NetworkSettings"]["Ports"]["8069/tcp"][0]["HostPort"]
    yield {"url": f"http://127.0.0.1:{port}", "erp": erp, "postgres": postgres,
           "start_postgres": start_postgres, "files": files, "env_id": env_id,
           "network": network}


def health(stack):
    return get(stack["url"] + "/web/health", timeout=4)


def test_erp_connects_and_reports_its_addons(stack):
    wait_for(lambda: health(stack)[0] == 200, timeout=30, interval=0.3, what="health 200")
    assert health(stack) == (200, {"status": "pass"})
    status, page = get(stack["url"] + "/")
    assert status == 200 and "Odoo" in page

    status, body = get(stack["url"] + "/berth/addons")
    assert status == 200
    assert [(a["name"], a["version"]) for a in body["addons"]] == [(ADDON, ADDON_VERSION)]

    status, info = get(stack["url"] + "/berth/info")
    assert (info["db_host"], info["db_user"], info["db_name"]) == (
        stack["postgres"].name, DB_USER, DB_NAME)
    assert info["database_uuid"]
    code, _ = stack["erp"].exec_run(["test", "-d", f"/var/lib/odoo/filestore/{DB_NAME}"])
    assert code == 0
    code, out = stack["erp"].exec_run(["id", "-u"])
    assert out.decode().strip() == "101"

    # Over the network PostgreSQL wants the password; its server runs as postgres.
    code, out = stack["erp"].exec_run([
        "python3", "-c", "import psycopg2, sys; psycopg2.connect(host=sys.argv[1], "
        "user=sys.argv[2], password='wrong', dbname=sys.argv[3], connect_timeout=5)",
        stack["postgres"].name, DB_USER, DB_NAME])
    assert code != 0 and b"password authentication failed" in out
    code, out = stack["postgres"].exec_run(["ps", "-o", "user=", "-p", "1"])
    assert out.decode().strip() == "postgres"


def test_database_survives_a_new_postgres_container_on_the_volume(stack):
    wait_for(lambda: health(stack)[0] == 200, timeout=30, interval=0.3, what="health 200")
    _, before = get(stack["url"] + "/berth/info")

    postgres = stack["postgres"]
    postgres.stop(timeout=10)
    postgres.reload()
    assert postgres.attrs["State"]["ExitCode"] == 0  # a clean (fast) shutdown
    assert b"database system is shut down" in postgres.logs()
    status, body = health(stack)
    assert status == 503 and body["status"] == "fail"
    postgres.remove()

    stack["postgres"] = stack["start_postgres"]()
    wait_for(lambda: health(stack)[0] == 200, timeout=30, interval=0.3,
             what="health 200 with the new PostgreSQL container")
    _, after = get(stack["url"] + "/berth/info")
    assert after["database_uuid"] == before["database_uuid"]
    logs = stack["postgres"].logs()
    assert b"appears to contain a database; skipping initialization" in logs
    assert b"initializing a new cluster" not in logs


def test_erp_takes_its_database_from_the_environment_and_installs_modules(
        stack, erp_image, module_labeled_container):
    """No db_* in the image's own odoo.conf: HOST, USER and PASSWORD give them, as with
    the official image; `odoo -d DB -i MODULE --stop-after-init` installs and exits 0."""
    wait_for(lambda: health(stack)[0] == 200, timeout=30, interval=0.3, what="health 200")
    init = module_labeled_container(
        stack["env_id"], "erp-init", ["odoo", "-d", DB_NAME, "-i", ADDON, "--stop-after-init"],
        image=erp_image, network=stack["network"].name,
        environment={"HOST": stack["postgres"].name, "USER": DB_USER, "PASSWORD": DB_PASSWORD},
        volumes={str(stack["files"] / "addons"): {"bind": "/mnt/extra-addons", "mode": "ro"}})
    assert init.wait(timeout=60)["StatusCode"] == 0, init.logs().decode()
    _, info = get(stack["url"] + "/berth/info")
    assert {"name": ADDON, "version": ADDON_VERSION} in info["installed_modules"]


@pytest.mark.parametrize("content, mode, message", [
    ("db_host = db\n", 0o644, b"cannot parse the configuration file"),
    ("[server]\ndb_host = db\n", 0o644, b"has no [options] section"),
    ("[options]\ndb_host = db\n", 0o600, b"cannot read the configuration file"),
], ids=["unparsable", "no-options", "unreadable"])
def test_erp_exits_on_a_bad_config(stack, erp_image, module_labeled_container,
                                   content, mode, message):
    conf = stack["files"] / f"bad-{uuid.uuid4().hex[:8]}.conf"
    conf.write_text(content)
    conf.chmod(mode)
    erp = module_labeled_container(
        stack["env_id"], "erp-bad", None, image=erp_image, network=stack["network"].name,
        volumes={str(conf): {"bind": "/etc/odoo/odoo.conf", "mode": "ro"}})
    assert erp.wait(timeout=30)["StatusCode"] != 0
    assert message in erp.logs()


def _odoo(stack, erp_image, module_labeled_container, addons, *args):
    """A one-off `odoo … --stop-after-init` on database DB_NAME: (exit code, output)."""
    run = module_labeled_container(
        stack["env_id"], "erp-once", ["odoo", "-d", DB_NAME, *args, "--stop-after-init"],
        image=erp_image, network=stack["network"].name,
        environment={"HOST": stack["postgres"].name, "USER": DB_USER, "PASSWORD": DB_PASSWORD},
        volumes={str(addons): {"bind": "/mnt/extra-addons", "mode": "ro"}})
    code = run.wait(timeout=60)["StatusCode"]
    return code, run.logs().decode()


def _write_addon(addons, version, migrations=None):
    addon = addons / "berth_mig"
    addon.mkdir(parents=True, exist_ok=True)
    (addon / "__manifest__.py").write_text(f"{{'name': 'Migrating', 'version': '{version}'}}\n")
    for rel, body in (migrations or {}).items():
        path = addon / "migrations" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    for path in (addons, *addons.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)


def test_erp_updates_modules_with_their_migration_scripts(
        stack, erp_image, module_labeled_container, tmp_path):
    """`-u` as Odoo does it: a module whose version rose runs the migration scripts
    above its installed version (pre-, post-, end-), in one transaction with the
    version change; a script that raises exits non-zero with the traceback and
    leaves the database as it was; an unchanged version runs nothing."""
    wait_for(lambda: health(stack)[0] == 200, timeout=30, interval=0.3, what="health 200")
    addons = tmp_path / "addons"

    def psql(sql):
        code, out = stack["postgres"].exec_run(
            ["psql", "-X", "-tA", "-U", DB_USER, "-d", DB_NAME, "-c", sql])
        assert code == 0, out
        return out.decode().strip()

    def installed():
        return psql("SELECT latest_version FROM ir_module_module WHERE name = 'berth_mig'")

    _write_addon(addons, "1.0")
    code, out = _odoo(stack, erp_image, module_labeled_container, addons, "-i", "berth_mig")
    assert code == 0, out
    assert installed() == "17.0.1.0"  # Odoo's form: the series, then the manifest's

    log_row = "def migrate(cr, version):\n    cr.execute(\"INSERT INTO mig_log VALUES (%s)\", ({!r},))\n"
    _write_addon(addons, "1.2", {
        "1.1/pre-create.py": "def migrate(cr, version):\n"
                             "    cr.execute('CREATE TABLE mig_log (step text)')\n"
                             "    cr.execute(\"INSERT INTO mig_log VALUES ('1.1 pre from ' || %s)\","
                             " (version,))\n",
        "1.1/post-a.py": log_row.format("1.1 post"),
        "17.0.1.2/pre-b.py": log_row.format("1.2 pre"),
        "17.0.1.2/end-c.py": log_row.format("1.2 end"),
        "1.0/pre-old.py": log_row.format("1.0: already installed, never runs"),
        "1.3/pre-later.py": log_row.format("1.3: not yet, never runs")})
    code, out = _odoo(stack, erp_image, module_labeled_container, addons, "-u", "berth_mig")
    assert code == 0, out
    assert "Running migration" in out and installed() == "17.0.1.2"
    assert psql("SELECT string_agg(step, ', ') FROM mig_log") == \
        "1.1 pre from 17.0.1.0, 1.2 pre, 1.1 post, 1.2 end"

    # The same version again: nothing runs.
    code, out = _odoo(stack, erp_image, module_labeled_container, addons, "-u", "all")
    assert code == 0 and "Running migration" not in out, out
    assert psql("SELECT count(*) FROM mig_log") == "4"

    # A script that raises: exit 1, its traceback, and nothing of the update stays.
    _write_addon(addons, "1.3", {
        "1.3/pre-later.py": "def migrate(cr, version):\n"
                            "    cr.execute(\"INSERT INTO mig_log VALUES ('1.3 half')\")\n"
                            "    raise RuntimeError('column partner_ref cannot be null')\n"})
    code, out = _odoo(stack, erp_image, module_labeled_container, addons, "-u", "berth_mig")
    assert code == 1, out
    assert "Traceback" in out and "column partner_ref cannot be null" in out
    assert installed() == "17.0.1.2" and psql("SELECT count(*) FROM mig_log") == "4"
    assert health(stack)[0] == 200  # the running ERP is not disturbed
