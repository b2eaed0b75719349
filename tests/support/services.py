"""Real servers for the tests: a private PostgreSQL cluster and a Redis
server, each on a free loopback port, torn down at the end of the session."""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile

from tests.support.waiting import wait_for


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc, log=None, timeout=15):
    """SIGTERM, then SIGKILL after `timeout` s; closes its log file."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if log is not None:
        log.close()


def wait_port(port, timeout=30):
    def listening():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, timeout=timeout, what=f"something listening on {port}")


class Postgres:
    """initdb + pg_ctl from Debian's postgresql package, run as the postgres user
    (PostgreSQL refuses to run as root)."""

    def __init__(self):
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            raise RuntimeError("PostgreSQL is not installed; `make test` installs it")
        self.bin = os.path.dirname(found[-1])
        self.dir = tempfile.mkdtemp(prefix="berth-pg-")
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    def _run(self, *args):
        cmd = list(args)
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self):
        data = os.path.join(self.dir, "data")
        self._run(f"{self.bin}/initdb", "-D", data, "-U", "berth", "-A", "trust", "--no-sync")
        self._run(f"{self.bin}/pg_ctl", "-D", data, "-l", os.path.join(self.dir, "log"), "-w",
                  "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                        f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=300",
                  "start")
        return self

    def url(self, dbname):
        return f"postgresql://berth@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, dbname):
        self._run(f"{self.bin}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "berth",
                  dbname)
        return self.url(dbname)

    def stop(self):
        try:
            self._run(f"{self.bin}/pg_ctl", "-D", os.path.join(self.dir, "data"), "-m", "immediate",
                      "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Redis:
    def __init__(self):
        exe = shutil.which("redis-server")
        if not exe:
            raise RuntimeError("redis-server is not installed; `make test` installs it")
        self.exe, self.port = exe, free_port()
        self.start()

    def start(self):
        """(Again, on the same port: Redis back after an outage.)"""
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


class MotoS3:
    """moto's standalone S3-compatible server (from the test extra), for the
    storage backend's contract tests: real presigned URLs over real HTTP."""

    def __init__(self):
        exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
        if not os.path.exists(exe):
            exe = shutil.which("moto_server")
        if not exe:
            raise RuntimeError("moto_server is not installed; `make install` installs it")
        self.port = free_port()
        self.proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
