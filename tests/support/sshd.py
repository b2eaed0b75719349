"""A real OpenSSH server on loopback, as a server the control plane reaches over SSH:
Debian's `sshd`, its own host key, configuration and authorized_keys, signing in
as the test's user (root here). What `berth-agent` needs there (its config, data
dir, environments' root) comes from the server's environment (`SetEnv`), as the
installer's defaults give it on a real server. Also a listener that accepts
connections and never says a word (a hung server)."""

import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

from tests.support.waiting import wait_for

SSHD = "/usr/sbin/sshd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    def __init__(self, root: Path, env: dict, extra=""):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host_key = self.root / "ssh_host_ed25519_key"
        self.authorized = self.root / "authorized_keys"
        self.authorized.write_text("")
        self.env = env
        self.extra = extra  # more sshd_config lines
        self.proc = None
        self.new_host_key()

    def new_host_key(self):
        """A fresh host key (the server reinstalled, or someone in the middle)."""
        for path in (self.host_key, self.host_key.with_suffix(".pub")):
            path.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key)],
                       check=True)

    @property
    def public_host_key(self):
        return " ".join(self.host_key.with_suffix(".pub").read_text().split()[:2])

    def fingerprint(self):
        out = subprocess.run(["ssh-keygen", "-l", "-f", str(self.host_key.with_suffix(".pub"))],
                             check=True, capture_output=True, text=True).stdout
        return out.split()[1]

    def authorize(self, public_key_line):
        with open(self.authorized, "a") as fh:
            fh.write(public_key_line.strip() + "\n")

    def _config(self):
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        path = self.root / "sshd_config"
        path.write_text(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {self.host_key}
PidFile {self.root}/sshd.pid
AuthorizedKeysFile {self.authorized}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 20
SetEnv {env}
{self.extra}
""")
        return path

    def start(self):
        Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation directory
        self.log = open(self.root / "sshd.log", "ab")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self._config())],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self._listening, timeout=10, what="sshd listening",
                 detail=(self.root / "sshd.log").read_text)
        return self

    def _listening(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.5).close()
            return True
        except OSError:
            return False

    def drop_connections(self):
        """Every open SSH connection cut, as a network failure would (the listener
        stays): each connection's own sshd process is killed."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        for pid in out.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.drop_connections()
            self.proc.terminate()
            self.proc.wait(10)
            self.log.close()

    def restart(self):
        self.stop()
        return self.start()


class Silent:
    """Accepts TCP connections on loopback and never answers: a hung server."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self):
        self.closed = True
        self.sock.close()
        for conn in self.held:
            conn.close()
