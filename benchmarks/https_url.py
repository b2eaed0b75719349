"""Benchmark: an environment's URL over HTTPS, with the real parts.

Starts the real `berth serve` (embedded SQLite) and a real `berth-agent run`, as
benchmarks/deploy_time.py does, with the proxy on (CP_PROXY_IMAGE: the local
Caddy stand-in, berth-test-proxy) and a real ACME server, Debian's `pebble`, on
loopback, validating names through a DNS server on loopback. The proxy listens
on loopback ports (where pebble validates). Then:

  first HTTPS answer - from `POST /api/public/v1/projects/{id}/environments` until
                       `GET https://<its url>/web/health` answers 200 through the
                       proxy, the certificate pebble issued on demand verified
                       against pebble's root (N runs; target: median under 15 s)
  requests per second - one environment's ERP through the proxy (HTTPS, keep-alive)
                       against directly at the ERP container's address on its
                       network (HTTP, keep-alive), C client connections each, R
                       rounds of D seconds, the two side by side in alternating
                       order (the machine is shared), for two requests:
                       `GET /web/health`, which like an ERP request does database
                       work (the stand-in connects to PostgreSQL and queries it),
                       and `GET /`, a page the stand-in answers with no work at
                       all, which shows the proxy's whole per-request cost (the
                       worst case). Target: through the proxy at least 80 % of
                       direct for the database-backed request (median of the
                       rounds' ratios); the no-work page is reported beside it.

The requests come from `h2load --h1` (nghttp2-client, a C load generator, so the
client's own TLS costs little of the two shared cores) when it is installed, else
from Python threads with keep-alive connections (`--client python`), whose TLS
takes CPU from the proxy and the ERP and understates the ratio.

Everything it made is removed at the end. Exits 1 on FAIL.

    python benchmarks/https_url.py [--runs 3] [--rounds 3] [--seconds 5] [--clients 8]
                                   [--client h2load|python]
"""

import argparse
import contextlib
import http.client
import json
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from deploy_time import Bench  # noqa: E402

from tests.support.dns_server import LoopbackDNS  # noqa: E402
from tests.support.proxy import (  # noqa: E402
    APPS_DOMAIN,
    PROXY_IMAGE,
    https_request,
    start_pebble,
)

TARGET_FIRST_ANSWER, TARGET_RATIO = 15.0, 0.80
TARGET_PATH = "/web/health"
PATHS = (TARGET_PATH, "/")


class HttpsBench(Bench):
    def __init__(self, tmp, dns, pebble):
        super().__init__(tmp, {"CP_PROXY_IMAGE": PROXY_IMAGE,
                               "CP_ACME_DIRECTORY_URL": pebble.directory,
                               "CP_ACME_CA_ROOTS": pebble.ca_file,
                               "CP_APPS_DOMAIN": APPS_DOMAIN})
        self.dns, self.pebble = dns, pebble
        self.agent_extra_env = {"BERTH_AGENT_PROXY_HTTP": f"127.0.0.1:{pebble.http_port}",
                                "BERTH_AGENT_PROXY_HTTPS": f"127.0.0.1:{pebble.tls_port}",
                                "BERTH_AGENT_PROXY_WATCH_SECONDS": "1"}

    def first_answer(self, n):
        """Seconds from the POST to the first verified 200 at the environment's URL."""
        started = time.perf_counter()
        env = self.api("POST", f"/projects/{self.project_id}/environments",
                       json={"name": f"https-{n}"}).json()
        self.env_ids.append(env["id"])
        host = env["url"].removeprefix("https://")
        self.dns.a(host)  # the platform's wildcard record
        roots = self.roots()

        def answered():
            try:
                return https_request(host, self.pebble.tls_port, "/web/health", roots,
                                     timeout=5)[0] == 200
            except OSError:
                return False
        self._wait(answered, 120, f"https://{host}/web/health")
        return env["id"], host, time.perf_counter() - started

    def roots(self):
        if not hasattr(self, "_roots"):
            self._roots = self.pebble.issuing_roots()
        return self._roots


def throughput(connect, seconds, clients, path="/"):
    """Requests per second of `clients` keep-alive connections sending `GET path`."""
    counts, stop = [0] * clients, time.monotonic() + seconds
    start = threading.Barrier(clients + 1)

    def client(i):
        conn = connect()
        start.wait()
        while time.monotonic() < stop:
            conn.request("GET", path)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise SystemExit(f"GET {path} answered {answer.status}")
            counts[i] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    began = time.monotonic()
    start.wait()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - began)


def h2load(url, seconds, clients, connect_to=None):
    """Requests per second that h2load got answered with 2xx over HTTP/1.1 keep-alive."""
    cmd = ["h2load", "--h1", "-c", str(clients), "-D", f"{seconds:g}", url]
    if connect_to:
        cmd[1:1] = [f"--connect-to={connect_to}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    out = proc.stdout + proc.stderr
    done = re.search(r"finished in ([\d.]+)s", out)
    ok = re.search(r"status codes: (\d+) 2xx", out)
    if not done or not ok:
        raise SystemExit(f"h2load said:\n{out}")
    return int(ok.group(1)) / float(done.group(1))


def h2load_targets(bench, env_id, host, path):
    port = bench.pebble.tls_port
    return (lambda s, c: h2load(f"https://{host}:{port}{path}", s, c, f"127.0.0.1:{port}"),
            lambda s, c: h2load(f"http://{bench.erp_address(env_id)}{path}", s, c))


def connections(bench, env_id, host):
    context = ssl.create_default_context(cadata=bench.roots())
    port = bench.pebble.tls_port

    class Proxied(http.client.HTTPSConnection):
        def connect(self):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            self.sock = context.wrap_socket(sock, server_hostname=host)

    ip, erp_port = bench.erp_address(env_id).split(":")
    return (lambda: Proxied(host, port, context=context, timeout=30),
            lambda: http.client.HTTPConnection(ip, int(erp_port), timeout=30))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--client", choices=("h2load", "python"),
                        default="h2load" if shutil.which("h2load") else "python")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="berth-https-bench-")
    dns = LoopbackDNS()
    pebble = start_pebble(Path(tmp), dns.address)
    bench = HttpsBench(tmp, dns, pebble)
    firsts, rounds = [], {}
    try:
        bench.start()
        for n in range(args.runs):
            env_id, host, took = bench.first_answer(n)
            firsts.append(took)
            print(f"run {n + 1}: first HTTPS answer {took:6.2f} s", file=sys.stderr)
        for path in PATHS:
            if args.client == "h2load":
                proxied, direct = h2load_targets(bench, env_id, host, path)
            else:
                proxied, direct = (lambda s, c, f=f, p=path: throughput(f, s, c, p)
                                   for f in connections(bench, env_id, host))
            for r in range(args.rounds):
                order = [("proxy", proxied), ("direct", direct)]
                if r % 2:
                    order.reverse()
                got = {name: run(args.seconds, args.clients) for name, run in order}
                rounds.setdefault(path, []).append(got)
                print(f"GET {path:12} round {r + 1}: proxy {got['proxy']:7.0f}/s  direct "
                      f"{got['direct']:7.0f}/s  ratio {got['proxy'] / got['direct']:.2f}",
                      file=sys.stderr)
    finally:
        with contextlib.suppress(docker.errors.NotFound):  # the agent's proxy, one per engine
            bench.docker.containers.get("berth-proxy").remove(force=True)
        bench.close()
        pebble.proc.terminate()
        dns.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    first = statistics.median(firsts)
    report = {"first_https_answer_s": {"median": first, "min": min(firsts), "max": max(firsts),
                                       "target": TARGET_FIRST_ANSWER,
                                       "pass": first < TARGET_FIRST_ANSWER}}
    for path, got in rounds.items():
        ratio = statistics.median(g["proxy"] / g["direct"] for g in got)
        report[f"requests_per_second {path}"] = {
            "proxy": statistics.median(g["proxy"] for g in got),
            "direct": statistics.median(g["direct"] for g in got), "ratio": ratio,
            "target": TARGET_RATIO if path == TARGET_PATH else None,
            "pass": ratio >= TARGET_RATIO if path == TARGET_PATH else True}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        f = report["first_https_answer_s"]
        print(f"first HTTPS answer: median {f['median']:.2f} s (min {f['min']:.2f}, max "
              f"{f['max']:.2f}) over {args.runs} runs, target < {TARGET_FIRST_ANSWER:.0f} s: "
              f"{'PASS' if f['pass'] else 'FAIL'}")
        for path in rounds:
            q = report[f"requests_per_second {path}"]
            verdict = (f"target >= {TARGET_RATIO:.2f}: {'PASS' if q['pass'] else 'FAIL'}"
                       if q["target"] else "(no target: the proxy's whole cost)")
            print(f"requests/s GET {path} ({args.clients} keep-alive connections, "
                  f"{args.client}): proxy {q['proxy']:.0f}, direct {q['direct']:.0f}, ratio "
                  f"{q['ratio']:.2f} (median of {args.rounds} rounds), {verdict}")
    sys.exit(0 if all(v["pass"] for v in report.values()) else 1)


if __name__ == "__main__":
    main()
