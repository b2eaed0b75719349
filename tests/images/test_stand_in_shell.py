"""`odoo shell` in the ERP stand-in, as Odoo's: a script on standard input (not a
terminal) runs with `env` (the superuser's, on -d DB), `self`, `odoo` and `openerp`;
stdout is the script's alone; an exception exits 1 with its traceback, sys.exit(n) with
n; the transaction is rolled back unless the script commits. On a terminal, a Python
console. The stand-in runs as a plain process (the tests' python) against the tests'
PostgreSQL, as in test_stand_in_mail.py."""

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import psycopg2
import pytest

from tests.support.services import stop_process

SCRIPT = Path(__file__).parents[2] / "images" / "erp" / "odoo-stand-in"
DB = "stand_in_shell"


@pytest.fixture(scope="module")
def erp(postgres, tmp_path_factory):
    """A database made by the stand-in's server (`-i base --stop-after-init`), and a
    config file naming no database, as the official image's."""
    files = tmp_path_factory.mktemp("erp-shell")
    conf = files / "odoo.conf"
    conf.write_text(f"[options]\ndb_host = 127.0.0.1\ndb_port = {postgres.port}\n"
                    f"db_user = berth\ndata_dir = {files / 'data'}\n")
    init = subprocess.run([sys.executable, str(SCRIPT), "-c", str(conf), "-d", DB,
                           "--stop-after-init"], capture_output=True, text=True, timeout=60)
    assert init.returncode == 0, init.stdout + init.stderr
    conn = psycopg2.connect(postgres.url(DB))
    conn.autocommit = True
    cr = conn.cursor()
    cr.execute("INSERT INTO res_partner (name) VALUES ('Azure Interior'), ('Deco Addict')")
    yield {"conf": conf, "cr": cr, "port": postgres.port, "files": files}
    conn.close()


def odoo_shell(erp, script, *options):
    return subprocess.run([sys.executable, str(SCRIPT), "shell", "-c", str(erp["conf"]),
                           *(options or ("-d", DB))], input=script, capture_output=True,
                          text=True, timeout=60)


def count(erp, table, where="true"):
    erp["cr"].execute(f"SELECT count(*) FROM {table} WHERE {where}")
    return erp["cr"].fetchone()[0]


def test_a_piped_script_prints_only_what_it_prints(erp):
    done = odoo_shell(erp, "print(env['res.partner'].search_count([]))\n")
    assert (done.returncode, done.stdout) == (0, f"{count(erp, 'res_partner')}\n"), done.stderr
    assert count(erp, "res_partner") >= 3  # the administrator's partner and two more


def test_the_variables_are_odoos(erp):
    done = odoo_shell(erp, "print(self.login, env.uid, env.cr.dbname, odoo is openerp,"
                           " odoo.SUPERUSER_ID, __name__)\n"
                           "env.cr.execute('SELECT login FROM res_users WHERE id = %s',"
                           " [self.id])\nprint(env.cr.fetchall())\n")
    assert (done.returncode, done.stdout) == (
        0, f"admin 1 {DB} True 1 __main__\n[('admin',)]\n"), done.stderr


@pytest.mark.parametrize("script, error", [
    ("print('before')\nraise ValueError('boom')\n", "ValueError: boom"),
    ("env['res.partner'].search_count([('name', '=', 'x')])\n",
     "NotImplementedError: the Odoo stand-in supports only []"),
    ("env['no.such.model']\n", "KeyError: 'no.such.model'"),
])
def test_an_exception_exits_1_with_its_traceback(erp, script, error):
    done = odoo_shell(erp, script)
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr and error in done.stderr
    assert done.stdout == ("before\n" if "before" in script else "")


def test_the_transaction_is_rolled_back_unless_the_script_commits(erp):
    insert = "env.cr.execute(\"INSERT INTO res_partner (name) VALUES (%s)\", ['{}'])\n"
    assert odoo_shell(erp, insert.format("rolled back")).returncode == 0
    assert count(erp, "res_partner", "name = 'rolled back'") == 0
    done = odoo_shell(erp, insert.format("committed") + "env.cr.commit()\n"
                      + insert.format("after the commit"))
    assert done.returncode == 0, done.stderr
    assert count(erp, "res_partner", "name = 'committed'") == 1
    assert count(erp, "res_partner", "name = 'after the commit'") == 0


def test_sys_exit_gives_the_exit_code(erp):
    done = odoo_shell(erp, "import sys\nprint('bye')\nsys.exit(3)\n")
    assert (done.returncode, done.stdout) == (3, "bye\n")


def test_without_a_database_there_is_no_env(erp):
    done = odoo_shell(erp, "print(sorted(k for k in globals() if not k.startswith('__')))\n",
                      "--no-http")
    assert (done.returncode, done.stdout) == (0, "['odoo', 'openerp']\n"), done.stderr


def test_the_entrypoint_runs_odoo_shell(erp):
    """`/entrypoint.sh odoo shell ...`: the database options from HOST, PORT, USER,
    PASSWORD, as for the server."""
    entrypoint = erp["files"] / "entrypoint.sh"
    if not entrypoint.exists():
        entrypoint.symlink_to(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "ODOO_RC"}
    env.update(HOST="127.0.0.1", PORT=str(erp["port"]), USER="berth", PASSWORD="unused")
    done = subprocess.run([sys.executable, str(entrypoint), "odoo", "shell", "-d", DB,
                           "--shell-interface", "python"],
                          input="print(env['res.users'].search_count([]))\n",
                          capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"{count(erp, 'res_users')}\n"), done.stderr


def test_on_a_terminal_it_is_a_python_console(erp):
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "shell", "-c", str(erp["conf"]),
                             "-d", DB], stdin=slave, stdout=slave, stderr=slave,
                            env={**os.environ, "TERM": "dumb"})
    os.close(slave)
    out = bytearray()

    def read_until(token, start=0, timeout=30):
        deadline = time.monotonic() + timeout
        while token not in out[start:]:
            ready, _, _ = select.select([master], [], [], max(0, deadline - time.monotonic()))
            try:
                chunk = os.read(master, 4096) if ready else b""
            except OSError:  # EIO: the process has ended
                chunk = b""
            assert chunk, f"no {token!r} in {bytes(out)!r}"
            out.extend(chunk)

    try:
        read_until(b">>> ")
        assert b"self: res.users(" in out and b"env: " in out
        start = len(out)
        os.write(master, b"6*7\n")
        read_until(b"42\r\n", start)
        os.write(master, b"exit(4)\n")
        assert proc.wait(timeout=30) == 4
    finally:
        if proc.poll() is None:
            stop_process(proc)
        os.close(master)
