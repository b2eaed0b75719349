"""The ERP stand-in runs add-ons' tests as Odoo's command line does (`--test-enable`,
`--test-tags`, `--stop-after-init`: exit 1 when a test failed), with Odoo's log lines,
runs scheduled actions as Odoo's cron runner (`lastcall`, `ir_cron_trigger`) and stores
attachments as Odoo does. As in
test_stand_in_shell.py, the stand-in is a plain process against the tests' PostgreSQL."""

import base64
import hashlib
import json
import re
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import psycopg2
import pytest

from tests.support.services import free_port, stop_process
from tests.support.waiting import wait_for

SCRIPT = Path(__file__).parents[2] / "images" / "erp" / "odoo-stand-in"
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \d+ (\w+) (\S+) (\S+): (.*)$")

SALE_TESTS = '''
from odoo.tests import TransactionCase, tagged


class TestPartners(TransactionCase):

    def test_count(self):
        self.env.cr.execute("INSERT INTO res_partner (name) VALUES ('Inside a test')")
        self.assertGreaterEqual(self.env["res.partner"].search_count([]), 2)

    def test_fails(self):
        self.assertEqual(self.env["res.partner"].search_count([]), 0,
                         "partners exist in the copy")

    def test_skipped(self):
        self.skipTest("not on this data")


@tagged("post_install", "-at_install")
class TestAfterAll(TransactionCase):

    def test_crm_is_there(self):
        self.env.cr.execute("SELECT state FROM ir_module_module WHERE name = 'berth_crm'")
        self.assertEqual(self.env.cr.fetchone()[0], "installed")
'''
CRM_TESTS = '''
from odoo.tests import TransactionCase


class TestLeads(TransactionCase):

    def test_admin(self):
        self.assertEqual(self.env.user.login, "admin")
'''


def addon(root, name, depends=(), tests=None):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "__manifest__.py").write_text(repr({"name": name, "version": "1.0",
                                                  "depends": ["base", *depends]}))
    if tests:
        (folder / "tests").mkdir()
        (folder / "tests" / "__init__.py").write_text("from . import test_main\n")
        (folder / "tests" / "test_main.py").write_text(textwrap.dedent(tests))


@pytest.fixture(scope="module")
def erp(postgres, tmp_path_factory):
    files = tmp_path_factory.mktemp("erp-tests")
    addon(files / "addons", "berth_sale", tests=SALE_TESTS)
    addon(files / "addons", "berth_crm", depends=["berth_sale"], tests=CRM_TESTS)
    addon(files / "addons", "berth_untested")
    conf = files / "odoo.conf"
    conf.write_text(f"[options]\ndb_host = 127.0.0.1\ndb_port = {postgres.port}\n"
                    f"db_user = berth\ndata_dir = {files / 'data'}\n"
                    f"addons_path = {files / 'addons'}\n")
    return {"conf": conf, "postgres": postgres, "files": files}


def odoo(erp, db, *options):
    done = subprocess.run([sys.executable, str(SCRIPT), "-c", str(erp["conf"]), "-d", db,
                           "--stop-after-init", *options], capture_output=True, text=True,
                          timeout=120)
    lines = [m.groups() for m in map(LINE.match, done.stdout.splitlines()) if m]
    return done, lines


def is_start(message):
    return message.startswith("Starting ") and message.endswith(" ...")


def messages(lines, logger_prefix=""):
    return [(level, msg) for level, _db, name, msg in lines if name.startswith(logger_prefix)]


def test_an_install_runs_the_modules_tests_in_order_and_a_failure_exits_1(erp):
    done, lines = odoo(erp, "tests_install", "-i", "berth_crm", "--test-enable")
    assert done.returncode == 1 and done.stderr == "", done.stdout + done.stderr
    assert {db for _level, db, _name, msg in lines if is_start(msg)} == {"tests_install"}
    assert [(name, msg) for _level, _db, name, msg in lines if is_start(msg)] == [  # the dependency's at_install tests first, the post_install ones last
        ("odoo.addons.berth_sale.tests.test_main", "Starting TestPartners.test_count ..."),
        ("odoo.addons.berth_sale.tests.test_main", "Starting TestPartners.test_fails ..."),
        ("odoo.addons.berth_sale.tests.test_main", "Starting TestPartners.test_skipped ..."),
        ("odoo.addons.berth_crm.tests.test_main", "Starting TestLeads.test_admin ..."),
        ("odoo.addons.berth_sale.tests.test_main", "Starting TestAfterAll.test_crm_is_there ...")]
    sale = messages(lines, "odoo.addons.berth_sale.")
    [failure] = [msg for level, msg in sale if level == "ERROR"]
    assert failure.startswith("FAIL: TestPartners.test_fails")
    assert "partners exist in the copy" in done.stdout and "Traceback" in done.stdout
    assert ("INFO", "skipped TestPartners.test_skipped : not on this data") in sale
    loading = messages(lines, "odoo.modules.loading")
    assert ("ERROR", "Module berth_sale: 1 failures, 0 errors of 3 tests") in loading
    assert ("ERROR", "1 failed, 0 error(s) of 5 tests when loading database 'tests_install'") \
        in messages(lines, "odoo.tests.result")
    # Each test's transaction is rolled back: the partner it made is gone.
    with psycopg2.connect(erp["postgres"].url("tests_install")) as conn, conn.cursor() as cr:
        cr.execute("SELECT count(*) FROM res_partner WHERE name = 'Inside a test'")
        assert cr.fetchone()[0] == 0


def test_test_tags_select_modules_classes_and_methods(erp):
    db = "tests_tags"
    done, _ = odoo(erp, db, "-i", "berth_crm")
    assert done.returncode == 0, done.stdout + done.stderr
    done, lines = odoo(erp, db, "-u", "berth_crm", "--test-tags", "/berth_crm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [m for _l, _d, _n, m in lines if is_start(m)] == [
        "Starting TestLeads.test_admin ..."]
    assert ("INFO", f"0 failed, 0 error(s) of 1 tests when loading database '{db}'") in \
        messages(lines, "odoo.tests.result")
    # A module updated is tested; an excluded method is not.
    done, lines = odoo(erp, db, "-u", "berth_sale",
                       "--test-tags", "/berth_sale,-/berth_sale:TestPartners.test_fails")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [m for _l, _d, _n, m in lines if is_start(m)] == [
        "Starting TestPartners.test_count ...", "Starting TestPartners.test_skipped ...",
        "Starting TestAfterAll.test_crm_is_there ..."]
    # Without -i or -u, every installed module's selected tests run.
    done, lines = odoo(erp, db, "--test-tags", ":TestLeads")
    assert [m for _l, _d, _n, m in lines if is_start(m)] == [
        "Starting TestLeads.test_admin ..."] and done.returncode == 0
    # No tests selected: a warning, exit 0; no test options: no tests at all.
    done, lines = odoo(erp, db, "-u", "berth_untested", "--test-enable")
    assert done.returncode == 0 and ("WARNING", f"0 failed, 0 error(s) of 0 tests when "
                                                f"loading database '{db}'") in lines_of(lines)
    done, lines = odoo(erp, db, "-u", "berth_sale")
    assert done.returncode == 0 and not [m for m in lines if is_start(m[3])]


def lines_of(lines):
    return [(level, msg) for level, _db, _name, msg in lines]


def test_tests_that_do_not_import_fail_the_run(erp):
    (erp["files"] / "addons" / "berth_untested" / "tests").mkdir()
    (erp["files"] / "addons" / "berth_untested" / "tests" / "__init__.py").write_text(
        "from . import test_broken\n")
    (erp["files"] / "addons" / "berth_untested" / "tests" / "test_broken.py").write_text(
        "import a_module_nobody_has\n")
    try:
        done, lines = odoo(erp, "tests_broken", "-i", "berth_untested", "--test-enable")
    finally:
        for f in ("test_broken.py", "__init__.py"):
            (erp["files"] / "addons" / "berth_untested" / "tests" / f).unlink()
        (erp["files"] / "addons" / "berth_untested" / "tests").rmdir()
    assert done.returncode == 1 and done.stderr == "", done.stdout + done.stderr  # no crash
    assert "a_module_nobody_has" in done.stdout
    assert ("ERROR", "0 failed, 1 error(s) of 0 tests when loading database 'tests_broken'") \
        in lines_of(lines), done.stdout[-3000:]  # counted once, not again for post_install


@pytest.fixture(scope="module")
def server(erp):
    """The server with its cron runner (Odoo's default of 2 cron threads)."""
    http_port, log_path = free_port(), erp["files"] / "server.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed by stop_process
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "-c", str(erp["conf"]), "-d",
                             "tests_cron", "-p", str(http_port)], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        def listening():
            assert proc.poll() is None, log_path.read_text()
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", http_port)) == 0

        wait_for(listening, what="the stand-in's HTTP port", timeout=30, detail=log_path.read_text)
        conn = psycopg2.connect(erp["postgres"].url("tests_cron"))
        conn.autocommit = True
        yield SimpleNamespace(cr=conn.cursor(), url=f"http://127.0.0.1:{http_port}",
                              filestore=erp["files"] / "data" / "filestore" / "tests_cron")
        conn.close()
    finally:
        stop_process(proc, log)


def test_due_crons_run_and_a_trigger_runs_one_at_once(server):
    cr = server.cr

    def lastcalls():
        cr.execute("SELECT name, lastcall, nextcall > now() at time zone 'UTC' FROM ir_cron"
                   " ORDER BY id")
        return cr.fetchall()

    # A new database's jobs are due at once: each called, its next call moved past now.
    wait_for(lambda: all(last for _n, last, _later in lastcalls()), what="the first calls",
             timeout=30)
    assert all(later for _n, _last, later in lastcalls())
    before = dict((n, last) for n, last, _ in lastcalls())
    cr.execute("INSERT INTO ir_cron_trigger (cron_id, call_at) SELECT id, now() at time zone"
               " 'UTC' FROM ir_cron WHERE name = 'Mail: Email Queue Manager'")
    cr.execute("NOTIFY cron_trigger, 'tests_cron'")
    wait_for(lambda: dict((n, last) for n, last, _ in lastcalls())["Mail: Email Queue Manager"]
             > before["Mail: Email Queue Manager"], what="the triggered call", timeout=10)
    after = dict((n, last) for n, last, _ in lastcalls())
    assert after["Base: Auto-vacuum internal data"] == before["Base: Auto-vacuum internal data"]
    cr.execute("SELECT count(*) FROM ir_cron_trigger")
    assert cr.fetchone()[0] == 0


def test_an_attachment_is_a_row_and_a_file_named_by_its_sha1(server):
    data = b"%PDF-1.7 invoice"
    body = json.dumps({"name": "invoice.pdf",
                       "content_base64": base64.b64encode(data).decode()}).encode()
    request = urllib.request.Request(f"{server.url}/berth/attachments", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        made = json.load(resp)
    sha1 = hashlib.sha1(data).hexdigest()
    assert made["store_fname"] == f"{sha1[:2]}/{sha1}" and made["file_size"] == len(data)
    assert (server.filestore / sha1[:2] / sha1).read_bytes() == data
    server.cr.execute("SELECT name, checksum, mimetype FROM ir_attachment WHERE id = %s",
                      (made["id"],))
    assert server.cr.fetchone() == ("invoice.pdf", sha1, "application/pdf")
