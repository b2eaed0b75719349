"""`berthctl builds` and `berthctl build [--wait]` against the real `berth serve`: builds
arranged in the control plane's database as the automation leaves them (no agent here;
the whole flow with an agent: tests/e2e/automation/test_build_flow.py). `--wait`
follows a running build to its end and exits with its result."""

import json
import threading
import time

from control_plane.app import create_app
from control_plane.infra import clock
from control_plane.models import Build, Organization
from control_plane.services.automation import test_log
from tests.berthctl.conftest import berthctl, clean_env, no_traceback
from tests.conftest import World

LOG = """2026-12-03 10:00:00,000 7 INFO odoo odoo.modules.loading: loading 1 modules...
2026-12-03 10:00:01,000 7 INFO odoo odoo.addons.shop.tests.test_order: Starting TestOrder.test_total ...
2026-12-03 10:00:01,250 7 INFO odoo odoo.addons.shop.tests.test_order: Starting TestOrder.test_tax ...
2026-12-03 10:00:01,500 7 INFO odoo odoo.addons.shop.tests.test_order: ======================================================================
2026-12-03 10:00:01,500 7 ERROR odoo odoo.addons.shop.tests.test_order: FAIL: TestOrder.test_tax
Traceback (most recent call last):
  File "/mnt/extra-addons/shop/tests/test_order.py", line 9, in test_tax
    self.assertEqual(order.tax, 21)
AssertionError: 0 != 21 : VAT missing
2026-12-03 10:00:01,550 7 INFO odoo odoo.addons.shop.tests.test_order: Starting TestOrder.test_eu ...
2026-12-03 10:00:01,600 7 INFO odoo odoo.addons.shop.tests.test_order: skipped TestOrder.test_eu : no EU data
2026-12-03 10:00:02,000 7 ERROR odoo odoo.modules.module: Can not `import` the tests of shop_extra.
Traceback (most recent call last):
ImportError: cannot import name 'x'
2026-12-03 10:00:03,000 7 ERROR odoo odoo.tests.result: 1 failed, 1 error(s) of 3 tests when loading database 'odoo'
"""


def _arranged(served):
    world = World(create_app({"DATA_DIR": served.env["CP_DATA_DIR"], "PROXY_IMAGE": ""}))
    org = Organization.get_by_id(served.org)
    project = world.project(org)
    tests, counts, _ = test_log.parse(LOG)
    now = clock.now()
    failed = Build.create(organization=org.id, project=project.id, branch="feature/tax",
                          commit="a" * 40, status="failed", stage="test", modules=["shop"],
                          tests=tests, counts=counts, log=LOG, started_at=now,
                          finished_at=now, reason="1 failed, 1 error(s) of 4 tests")
    running = Build.create(organization=org.id, project=project.id, branch="feature/ok",
                           commit="b" * 40, status="running", stage="create", started_at=now)
    return str(project.id), str(failed.id), str(running.id)


def test_builds_a_build_and_waiting_for_one(served, tmp_path):
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.keys["read_only"])
    project_id, failed_id, running_id = _arranged(served)

    r = berthctl("builds", project_id, env=env)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert rows[1][:4] == [running_id, "feature/ok", "b" * 10, "running"]
    assert rows[2][:4] == [failed_id, "feature/tax", "a" * 10, "failed"]
    assert "1/4 passed, 1 failed, 1 errors" in r.stdout
    r = berthctl("-o", "json", "builds", project_id, "--branch", "feature/tax", env=env)
    assert [b["id"] for b in json.loads(r.stdout)["data"]] == [failed_id]

    # One build: failures and errors first, each with its traceback.
    r = berthctl("build", failed_id, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"build {failed_id}: failed (1 failed, 1 error(s) of 4 tests)"
    statuses = [line.split()[0] for line in lines if line.split()[:1] in (
        ["failed"], ["error"], ["passed"], ["skipped"])]
    assert statuses == ["error", "failed", "skipped", "passed"]
    assert "FAILED: shop TestOrder.test_tax" in r.stdout
    assert "AssertionError: 0 != 21 : VAT missing" in r.stdout
    assert "ImportError: cannot import name 'x'" in r.stdout
    # --wait on a build that ended: its result is the exit code.
    assert berthctl("build", failed_id, "--wait", env=env).returncode == 6

    # --wait follows a running build until it ends.
    def passes():
        time.sleep(3)
        Build.update(status="passed", stage="test", finished_at=clock.now(),
                     counts={"tests": 1, "passed": 1, "failed": 0, "error": 0, "skipped": 0},
                     tests=[{"name": "T.t", "module": "shop", "status": "passed",
                             "seconds": 0.1, "failure": None}]).where(
            Build.id == running_id).execute()
    threading.Thread(target=passes, daemon=True).start()
    r = berthctl("build", running_id, "--wait", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "running: create"
    assert f"build {running_id}: passed" in r.stdout

    # Another organization's key finds no such build; a bad id is a usage error.
    org = served.admin("org", "create", "--name", "other-org")["id"]
    key = served.admin("key", "create", "--org", org, "--name", "r", "--type", "read_only",
                       "--scope", "organization")["key"]
    other = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=key)
    r = berthctl("build", failed_id, env=other)
    assert r.returncode == 4 and "No such build" in r.stderr
    r = berthctl("build", "not-an-id", env=env)
    assert r.returncode == 2
    no_traceback(r)


def test_the_log_is_read_as_odoo_writes_it():
    tests, counts, summary = test_log.parse(LOG)
    assert counts == {"tests": 4, "passed": 1, "failed": 1, "error": 1, "skipped": 1}
    assert summary == {"failed": 1, "errors": 1, "tests": 3}
    assert [(t["module"], t["name"], t["status"]) for t in tests] == [
        ("shop_extra", "shop_extra.tests", "error"), ("shop", "TestOrder.test_tax", "failed"),
        ("shop", "TestOrder.test_eu", "skipped"), ("shop", "TestOrder.test_total", "passed")]
    assert tests[1]["failure"].endswith("AssertionError: 0 != 21 : VAT missing")
    assert tests[3]["seconds"] == 0.25 and tests[1]["seconds"] == 0.25
    assert tests[2]["failure"] == "no EU data"
    assert test_log.parse("") == ([], {"tests": 0, "passed": 0, "failed": 0, "error": 0,
                                       "skipped": 0}, None)
