"""Run the real `berth serve` in a subprocess on a free port."""

import os
import re
import subprocess
import sys
from pathlib import Path

import requests

from tests.support.services import free_port
from tests.support.waiting import wait_for

BERTH = str(Path(sys.executable).with_name("berth"))


class Served:
    def __init__(self, data_dir, extra_env=None, berth=BERTH):
        self.berth = berth  # this release's `berth`, or another's
        # No background wheelhouse build (a pip run) in every served test; the tests
        # of that build turn it on, the installer's tests run `berth wheelhouse`.
        self.env = {**os.environ, "CP_DATA_DIR": str(data_dir),
                    "CP_WHEELHOUSE_AUTO_BUILD": "0", **(extra_env or {})}
        self.log_path = Path(data_dir) / "serve.log"
        Path(data_dir).mkdir(parents=True, exist_ok=True)

    def admin(self, *args):
        out = subprocess.run([self.berth, "admin", *args], env=self.env, capture_output=True,
                             text=True, check=True)
        import json
        return json.loads(out.stdout)

    def start(self, timeout=30, port=None, grpc_port=0):
        """`port`, `grpc_port`: fixed ones (a restart where agents expect it)."""
        self.log = open(self.log_path, "w")
        # The public URL must be the real one: install commands embed it.
        port = port or free_port()
        self.env["CP_PUBLIC_URL"] = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([self.berth, "serve", "--http", f"127.0.0.1:{port}",
                                      "--grpc", f"127.0.0.1:{grpc_port}"], env=self.env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        text = wait_for(self._listening, timeout=timeout, what="berth serve listening",
                        detail=self.log_path.read_text)
        self.url = re.search(r"listening on (http://\S+)", text).group(1)
        self.grpc = re.search(r"^berth: gateway listening on (\S+)", text, re.M).group(1)
        requests.get(self.url + "/healthz", timeout=5).raise_for_status()
        return self

    def _listening(self):
        """Its log once it says so; an AssertionError if it exited first."""
        text = self.log_path.read_text()
        if re.search(r"listening on (http://\S+)", text):
            return text
        assert self.proc.poll() is None, "berth serve did not start:\n" + text
        return None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        return self.log_path.read_text()
