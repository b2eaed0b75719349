"""Module updates on deploy, end to end (the stand of tests/support/backup_flow.py on
local storage: a real control plane over HTTP, a real `berth-agent run`, real
containers of the ERP stand-in, whose `-u` runs a module's migration scripts).

v1 of the add-on `shop` is installed. v2 bumps its version with a migration that
adds a table: the deploy updates exactly that module, the database records the
new version and holds the table. A redeploy with no version change updates
nothing. v3's migration raises: the deploy fails with the module's error, the
environment is back on v2's code and ERP, and its database is the pre-deploy
backup (what the failed update committed is gone). A commit with an older
version updates nothing: Odoo cannot downgrade. With the environment's automatic
revert off, a failed update leaves it `failed` on the new code.

Modules named in the environment's `install_modules` are installed by the next
deploy; a new ERP image that updates the database but cannot serve fails its
health check at once, and the deploy reverts code, image and database."""

import subprocess

import pytest

from control_plane.models import Event
from tests.support.backup_flow import (
    V1,
    P,
    deployed,
    erp_info,
    psql,
    redeploy,
    settled,
    task_log,
    wait_running,
)


def push(s, tmp_path, version, migrations=None, message=None):
    """A commit of the project's repository: shop at `version`, with migration scripts."""
    work = tmp_path / "work"
    (work / "shop" / "__manifest__.py").write_text(
        f'{{"name": "Shop", "version": "{version}"}}')
    for rel, body in (migrations or {}).items():
        path = work / "shop" / "migrations" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    git = ["git", "-c", "user.email=d@example.com", "-c", "user.name=d"]
    for cmd in ([*git, "add", "-A"], [*git, "commit", "-qm", message or f"shop {version}"],
                ["git", "push", "-q", str(tmp_path / "repo.git"), "main"]):
        subprocess.run(cmd, cwd=work, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True,
                          capture_output=True, text=True).stdout.strip()




def version(s, env_id):
    return psql(s, env_id, "SELECT latest_version FROM ir_module_module WHERE name = 'shop'")


@pytest.mark.parametrize("stand", ["local"], indirect=True)
def test_a_deploy_updates_changed_modules_and_reverts_a_failed_update(client, stand, tmp_path):
    s = stand
    env_id = deployed(client, s, "Shop")
    wait_running(client, s, env_id)
    # v1 installed, as a user installs it from the ERP's apps
    psql(s, env_id, "UPDATE ir_module_module SET state = 'installed' WHERE name = 'shop'")
    assert version(s, env_id) == "17.0.1.0"

    # v2: the version rose, with a migration: exactly that module is updated, and the
    # ERP serves the table the migration made.
    v2 = push(s, tmp_path, "1.1", {
        "1.1/post-orders.py": "def migrate(cr, version):\n"
                              "    cr.execute('CREATE TABLE shop_order (id int, ref text)')\n"})
    done = redeploy(client, s, env_id)
    assert done["status"] == "success", done
    assert done["git_commit"] == v2
    log = task_log(client, s, env_id, done["id"])
    assert "module shop: 17.0.1.0 -> 17.0.1.1, to update" in log
    assert "-u shop" in log and "Running migration" in log
    assert version(s, env_id) == "17.0.1.1"
    info = erp_info(s, env_id)
    assert {"name": "shop", "version": "17.0.1.1"} in info["installed_modules"]
    assert info["tables"]["shop_order"] == ["id", "ref"]

    # The same version again: no update, and the task log says so.
    done = redeploy(client, s, env_id)
    assert done["status"] == "success", done
    log = task_log(client, s, env_id, done["id"])
    assert "no module changed version: no update" in log and "-u shop" not in log

    # v3's migration raises: the deploy fails, v2's code and the pre-deploy backup
    # are back, and the ERP serves again.
    psql(s, env_id, "INSERT INTO shop_order VALUES (1, 'before the backup')")
    push(s, tmp_path, "1.2", {
        # Odoo commits module by module: what an update did before it failed stays
        # unless the database goes back to the backup.
        "1.2/pre-break.py": "def migrate(cr, version):\n"
                            "    cr.execute(\"UPDATE shop_order SET ref = 'half done'\")\n"
                            "    cr.connection.commit()\n"
                            "    raise RuntimeError('shop_order.ref cannot be null')\n"})
    r = client.post(f"{V1}/environments/{env_id}/deploy", headers=s.user, json={"force": True})
    assert r.status_code == 201, r.json
    task = r.json["deployment"]["id"]
    done = settled(client, s, task)
    assert done["status"] == "failed", done
    assert "module update (update shop) failed" in done["error_message"]
    assert "reverted" in done["error_message"]
    failed = Event.select().where(Event.name == "deploy.failed").order_by(
        Event.created_at.desc()).first()
    assert failed.data["task_id"] == task
    assert "shop_order.ref cannot be null" in failed.data["error_message"]
    log = task_log(client, s, env_id, task)
    assert "shop_order.ref cannot be null" in log and "Traceback" in log
    assert "the database is back as the pre-deploy backup" in log
    assert version(s, env_id) == "17.0.1.1"
    assert psql(s, env_id, "SELECT ref FROM shop_order") == "before the backup"
    env = client.get(f"{P}/environments/{env_id}", headers=s.reader).json
    assert env["status"] == "running"
    addons = s.root / env_id / "addons"
    assert (addons / "shop" / "__manifest__.py").read_text() == \
        '{"name": "Shop", "version": "1.1"}'
    assert not (addons.parent / "addons.previous").exists()
    status = client.get(f"{P}/environments/{env_id}/status", headers=s.reader).json
    assert status["last_deploy"]["status"] == "failed"
    names = {c.name for c in s.envs.docker.containers.list(all=True, ignore_removed=True)}
    erp = s.envs._names(env_id)["erp"]
    assert erp in names and f"{erp}-previous" not in names and f"{erp}-update" not in names

    # An older version (a commit going back): Odoo cannot downgrade; nothing is updated.
    push(s, tmp_path, "1.0", message="back to 1.0")
    done = redeploy(client, s, env_id)
    assert done["status"] == "success", done
    log = task_log(client, s, env_id, done["id"])
    assert "Odoo cannot downgrade a module: not updated" in log and "-u shop" not in log
    assert version(s, env_id) == "17.0.1.1"

    # Automatic revert off: a failed update leaves the environment as it left it,
    # `failed`, and the message names the pre-deploy backup that holds the database.
    r = client.patch(f"{V1}/projects/{s.project.id}/environments/{env_id}", headers=s.user,
                     json={"auto_revert": False})
    assert r.status_code == 200 and r.json["auto_revert"] is False
    push(s, tmp_path, "1.3", {
        "1.3/pre-break.py": "def migrate(cr, version):\n"
                            "    raise RuntimeError('not this time either')\n"})
    done = redeploy(client, s, env_id)
    assert done["status"] == "failed", done
    assert "automatic revert is off" in done["error_message"]
    assert "pre-deploy backup" in done["error_message"]
    assert (addons / "shop" / "__manifest__.py").read_text() == \
        '{"name": "Shop", "version": "1.3"}'  # the new code stays
    assert client.get(f"{P}/environments/{env_id}", headers=s.reader).json["status"] == \
        "failed"
    names = {c.name for c in s.envs.docker.containers.list(all=True, ignore_removed=True)}
    assert f"{erp}-previous" not in names


def installed(s, env_id):
    return psql(s, env_id, "SELECT string_agg(name, ',' ORDER BY name) FROM ir_module_module"
                           " WHERE state = 'installed'")


@pytest.mark.parametrize("stand", ["local"], indirect=True)
def test_named_modules_are_installed_and_an_erp_failing_after_the_update_reverts(
        client, stand, tmp_path, erp_image, erp_that_cannot_serve):
    s = stand
    env_id = deployed(client, s, "Shop")
    wait_running(client, s, env_id)
    assert installed(s, env_id) == "base"

    # A new add-on, named to install with one that exists nowhere: the deploy
    # installs it, says it cannot install the other, and the ERP serves it.
    extra = tmp_path / "work" / "shop_extra"
    extra.mkdir()
    (extra / "__manifest__.py").write_text('{"name": "Shop extra", "version": "1.0"}')
    push(s, tmp_path, "1.0", message="shop_extra")
    r = client.patch(f"{V1}/projects/{s.project.id}/environments/{env_id}", headers=s.user,
                     json={"install_modules": ["shop_extra", "shop", "nowhere"]})
    assert r.status_code == 200 and r.json["install_modules"] == ["shop_extra", "shop", "nowhere"]
    done = redeploy(client, s, env_id)
    assert done["status"] == "success", done
    log = task_log(client, s, env_id, done["id"])
    assert "module shop_extra: named to install in the environment's settings" in log
    assert "-i shop,shop_extra --stop-after-init" in log
    assert "module nowhere: named to install, but no add-on of that name" in log
    assert installed(s, env_id) == "base,shop,shop_extra"
    assert {"name": "shop_extra", "version": "17.0.1.0"} in \
        erp_info(s, env_id)["installed_modules"]
    # Installed now: the next deploy has nothing to do.
    done = redeploy(client, s, env_id)
    log = task_log(client, s, env_id, done["id"])
    assert done["status"] == "success" and "no module changed version: no update" in log

    # v1.1 on a new image that cannot serve: the update runs, the new ERP exits as it
    # starts, and the deploy reverts (at once, not at the health check's timeout).
    push(s, tmp_path, "1.1", {
        "1.1/post-flag.py": "def migrate(cr, version):\n"
                            "    cr.execute('CREATE TABLE shop_flag (id int)')\n"})
    s.settings["ERP_IMAGE"] = erp_that_cannot_serve
    try:
        r = client.post(f"{V1}/environments/{env_id}/deploy", headers=s.user,
                        json={"force": True})
        assert r.status_code == 201, r.json
        done = settled(client, s, r.json["deployment"]["id"])
    finally:
        s.settings["ERP_IMAGE"] = erp_image
    assert done["status"] == "failed", done
    assert "the ERP exits as it starts" in done["error_message"]
    assert "No module named 'gevent'" in done["error_message"]
    assert "reverted" in done["error_message"]
    log = task_log(client, s, env_id, done["id"])
    assert "the module update is done (update shop)" in log
    assert "the database is back as the pre-deploy backup" in log
    assert psql(s, env_id, "SELECT latest_version FROM ir_module_module WHERE name = 'shop'") \
        == "17.0.1.0"
    assert psql(s, env_id, "SELECT to_regclass('shop_flag') IS NULL") == "t"
    assert client.get(f"{P}/environments/{env_id}", headers=s.reader).json["status"] == \
        "running"
    erp = s.envs._container(s.envs._names(env_id)["erp"])
    assert erp.status == "running" and erp_image in erp.image.tags
    assert erp_info(s, env_id)["installed_modules"] is not None

    # A destroyed environment deployed again makes a new database: with the named
    # modules installed from the start.
    r = client.delete(f"{V1}/deployments/environment/{env_id}/destroy?delete_data=true",
                      headers=s.user)
    assert r.status_code == 200, r.json
    done = redeploy(client, s, env_id)
    assert done["status"] == "success", done
    log = task_log(client, s, env_id, done["id"])
    assert "it is made with the modules named to install (nowhere, shop, shop_extra)" in log
    assert installed(s, env_id) == "base,shop,shop_extra"
