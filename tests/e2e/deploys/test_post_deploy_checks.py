"""Post-deploy checks, end to end (a real control plane over HTTP, a real `berth-agent
run`, real containers of the ERP stand-in): a deploy whose ERP answers its health
check but has a module left `to upgrade`, attachments whose files are gone or a cron
runner that does not run fails and reverts to the previous ERP; with the
environment's `post_deploy_checks` at `warn` the same deploy stands, the failing
check in its record. A deploy with no module update whose new ERP does not serve
reverts too. (The websocket check through the proxy: tests/e2e/proxy.)"""

import base64
import json
import urllib.request

import pytest

from agent.deploy.environments import erp_address
from tests.support.backup_flow import (
    V1,
    P,
    deployed,
    psql,
    redeploy,
    settled,
    task_log,
    wait_running,
)


def checks(client, s, task_id):
    done = client.get(f"{V1}/deployments/{task_id}", headers=s.user).json
    return {c["name"]: (c["status"], c["detail"]) for c in done["extra_data"]["checks"]}


def erp_id(s, env_id):
    erp = s.envs._container(s.envs._names(env_id)["erp"])
    return erp.id, erp.status


def attach(s, env_id, name):
    address = erp_address(s.envs.docker, s.envs._names(env_id)["erp"])
    body = json.dumps({"name": name, "content_base64": base64.b64encode(
        name.encode()).decode()}).encode()
    request = urllib.request.Request(f"http://{address}/berth/attachments", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.load(r)["store_fname"]


def settings(client, s, env_id, **changes):
    r = client.patch(f"{V1}/projects/{s.project.id}/environments/{env_id}", headers=s.user,
                     json=changes)
    assert r.status_code == 200, r.json
    return r.json


@pytest.mark.parametrize("stand", ["local"], indirect=True)
def test_a_deploy_that_answers_but_does_not_work_reverts(client, stand, erp_image,
                                                         erp_without_crons,
                                                         erp_that_cannot_serve):
    s = stand
    env_id = deployed(client, s, "Shop")
    wait_running(client, s, env_id)
    first = client.get(f"{V1}/deployments?project_id={s.project.id}", headers=s.user).json
    seen = checks(client, s, first["data"][0]["id"])
    assert seen["cron"][0] == "passed" and "ran when triggered" in seen["cron"][1]
    assert seen["modules"][0] == "passed"
    assert seen["websocket"] == ("skipped",
                                 "no workers: the ERP serves /websocket on its HTTP port")
    assert seen["attachments"][0] == "skipped"
    assert settings(client, s, env_id)["post_deploy_checks"] == "enforce"

    # A module left `to upgrade` (an update that stopped half-way, a button pressed
    # in the apps list): the deploy fails and the previous ERP serves again.
    before = erp_id(s, env_id)
    psql(s, env_id, "UPDATE ir_module_module SET state = 'to upgrade' WHERE name = 'base'")
    done = redeploy(client, s, env_id)
    assert done["status"] == "failed", done
    assert "the post-deploy checks failed (modules: modules left half-done: base " \
           "(to upgrade))" in done["error_message"]
    assert "reverted: the previous code is back (no module was updated" in done["error_message"]
    assert checks(client, s, done["id"])["modules"][0] == "failed"
    assert erp_id(s, env_id) == (before[0], "running")
    assert client.get(f"{P}/environments/{env_id}", headers=s.reader).json["status"] == "running"
    log = task_log(client, s, env_id, done["id"])
    assert "post-deploy check modules: failed: modules left half-done: base (to upgrade)" in log
    assert "the previous add-ons, configuration and ERP container are back" in log
    names = {c.name for c in s.envs.docker.containers.list(all=True, ignore_removed=True)}
    assert s.envs._names(env_id)["erp"] + "-previous" not in names
    assert not (s.root / env_id / "odoo.conf.previous").exists()

    # `warn`: the same deploy stands, the failing check in its record.
    assert settings(client, s, env_id, post_deploy_checks="warn")["post_deploy_checks"] == "warn"
    done = redeploy(client, s, env_id)
    assert done["status"] == "success", done
    assert checks(client, s, done["id"])["modules"][0] == "failed"
    assert "the environment's post-deploy checks only warn" in task_log(client, s, env_id,
                                                                       done["id"])
    assert erp_id(s, env_id)[0] != before[0]
    psql(s, env_id, "UPDATE ir_module_module SET state = 'installed' WHERE name = 'base'")
    settings(client, s, env_id, post_deploy_checks="enforce")

    # Attachments whose files are gone (a filestore moved, a partial restore).
    store = s.root / env_id / "filestore" / "filestore" / "odoo"
    names = [attach(s, env_id, f"invoice-{i}.pdf") for i in range(3)]
    for name in names:
        (store / name).unlink()
    done = redeploy(client, s, env_id)
    assert done["status"] == "failed", done
    status, detail = checks(client, s, done["id"])["attachments"]
    assert status == "failed" and detail.startswith("3 of 3 sampled attachments have no file")
    psql(s, env_id, "DELETE FROM ir_attachment")

    # A new image whose server runs no cron: the triggered action never runs.
    s.settings["ERP_IMAGE"] = erp_without_crons
    try:
        done = redeploy(client, s, env_id)
    finally:
        s.settings["ERP_IMAGE"] = erp_image
    assert done["status"] == "failed", done
    status, detail = checks(client, s, done["id"])["cron"]
    assert status == "failed" and "the cron runner is not running" in detail
    assert erp_image in s.envs._container(s.envs._names(env_id)["erp"]).image.tags
    # Crons off by the environment's own settings: nothing to check.
    r = client.patch(f"{V1}/environments/{env_id}/config", headers=s.user,
                     json={"erp_options": {"max_cron_threads": 0}})
    assert r.status_code == 201, r.json
    done = settled(client, s, r.json["deployment"]["id"])
    assert done["status"] == "success", done
    assert checks(client, s, done["id"])["cron"] == (
        "skipped", "max_cron_threads is 0: this ERP runs no crons")

    # No module to update and a new ERP that exits as it starts: the previous ERP
    # comes back (before, the deploy removed it first and left none).
    before = erp_id(s, env_id)
    s.settings["ERP_IMAGE"] = erp_that_cannot_serve
    try:
        done = redeploy(client, s, env_id)
    finally:
        s.settings["ERP_IMAGE"] = erp_image
    assert done["status"] == "failed", done
    assert "the new ERP did not serve: the ERP exits as it starts" in done["error_message"]
    assert "reverted: the previous code is back" in done["error_message"]
    assert erp_id(s, env_id) == (before[0], "running")
    assert client.get(f"{P}/environments/{env_id}", headers=s.reader).json["status"] == "running"
