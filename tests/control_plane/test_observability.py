"""What an operator sees: /metrics in Prometheus text on every process kind (the
HTTP app's route; `--metrics` on the gateway and the scheduler), and one JSON log
line per request naming the request id the response carries."""

import json
import os
import subprocess

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from control_plane.services.tasks import queue
from tests.support.agents import registered_server
from tests.support.serve import BERTH, Served
from tests.support.services import free_port, stop_process
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def _samples(url):
    r = requests.get(url, timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=")
    return [s for family in text_string_to_metric_families(r.text) for s in family.samples]


def _value(samples, name, **labels):
    found = [s.value for s in samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(found) if found else None


def test_requests_are_counted_by_route_and_logged_with_the_id_they_answer_with(tmp_path):
    served = Served(tmp_path / "data").start()
    try:
        org = served.admin("org", "create", "--name", "acme")
        key = served.admin("key", "create", "--org", org["id"], "--name", "k",
                           "--type", "read_only", "--scope", "organization")["key"]
        auth = {"Authorization": f"Bearer {key}"}
        listed = [requests.get(served.url + "/api/public/v1/projects", headers=auth, timeout=10)
                  for _ in range(3)]
        traced = requests.get(served.url + "/api/public/v1/projects", timeout=10,
                              headers={**auth, "X-Request-Id": "client-trace-0001"})
        forged = requests.get(served.url + "/healthz?token=sekrit", timeout=10,
                              headers={"X-Request-Id": '"} {"level": "error'})
        missing = requests.get(served.url + f"/api/public/v1/projects/{'0' * 8}", headers=auth,
                               timeout=10)
        samples = _samples(served.url + "/metrics")
    finally:
        log = served.stop()

    assert all(r.status_code == 200 for r in listed)
    ids = {r.headers["X-Request-Id"] for r in listed}
    assert len(ids) == 3 and all(len(i) == 32 for i in ids)  # one new id a request
    assert traced.headers["X-Request-Id"] == "client-trace-0001"
    assert forged.headers["X-Request-Id"] != '"} {"level": "error'
    assert missing.status_code == 404

    route = "/api/public/v1/projects"
    assert _value(samples, "berth_http_requests_total", route=route, status="200",
                  method="GET") == 4
    assert _value(samples, "berth_http_request_duration_seconds_count", route=route) == 4
    assert _value(samples, "berth_http_requests_total", status="404") >= 1
    # Routes are templates, never raw paths: no label per id.
    assert not any("0" * 8 in s.labels.get("route", "") for s in samples)

    lines = [json.loads(ln) for ln in log.splitlines() if ln.startswith("{")]
    access = [ln for ln in lines if ln["logger"] == "berth.access"]
    [line] = [ln for ln in access if ln["request_id"] == "client-trace-0001"]
    assert line["status"] == 200 and line["route"] == route and line["method"] == "GET"
    assert line["process"] == "serve" and line["duration_ms"] >= 0
    for r in listed + [forged, missing]:
        assert any(ln["request_id"] == r.headers["X-Request-Id"] for ln in access)
    assert "sekrit" not in log and key not in log


def _process(args, env, log_path):
    log = open(log_path, "w")
    return subprocess.Popen([BERTH, *args], env=env, stdout=log, stderr=subprocess.STDOUT), log


def _scrape_until(url, predicate, what, timeout=30):
    """The samples of `url` once `predicate` holds of them."""
    def scraped():
        try:
            samples = _samples(url)
        except requests.ConnectionError:
            return None
        return samples if predicate(samples) else None

    return wait_for(scraped, timeout=timeout, interval=0.2, what=f"{what} at {url}")


def test_gateway_and_scheduler_processes_serve_their_metrics(app, world, tmp_path, agents):
    env = {**os.environ, "CP_DATA_DIR": app.config["DATA_DIR"], "CP_SECRET_KEY": "test-secret",
           **({"CP_DATABASE_URL": app.config["DATABASE_URL"]} if app.config["DATABASE_URL"] else {})}
    org = world.org()
    connected, credential = registered_server(org, "connected")
    offline, _ = registered_server(org, "offline")
    grpc_port, gw_metrics, sched_metrics = free_port(), free_port(), free_port()
    gw, gw_log = _process(["gateway", "--grpc", f"127.0.0.1:{grpc_port}",
                           "--metrics", f"127.0.0.1:{gw_metrics}"], env, tmp_path / "gw.log")
    sched, sched_log = _process(["scheduler", "--metrics", f"127.0.0.1:{sched_metrics}"], env,
                                tmp_path / "sched.log")
    try:
        url = f"http://127.0.0.1:{gw_metrics}/metrics"
        samples = _scrape_until(url, lambda s: _value(s, "berth_gateway_agents_connected") == 0,
                                "the gateway's metrics")
        assert _value(samples, "berth_agent_commands_pending") == 0, (tmp_path / "gw.log").read_text()

        agents(connected, credential, address=f"127.0.0.1:{grpc_port}")
        _scrape_until(url, lambda s: _value(s, "berth_gateway_agents_connected") == 1,
                      "the agent connected")

        queue.enqueue(offline.id, "routes")  # nobody takes it: it waits, and ages
        _scrape_until(url, lambda s: _value(s, "berth_agent_commands_pending") == 1
                      and (_value(s, "berth_agent_command_oldest_age_seconds") or 0) >= 1,
                      "the command pending, and a second old")

        samples = _scrape_until(
            f"http://127.0.0.1:{sched_metrics}/metrics",
            lambda s: (_value(s, "berth_scheduler_job_runs_total", job="reaper",
                              outcome="ok") or 0) >= 1, "a reaper run")
        assert _value(samples, "berth_scheduler_job_duration_seconds_count", job="webhooks") >= 1
        assert _value(samples, "berth_webhook_deliveries_pending") == 0
    finally:
        stop_process(gw, gw_log)
        stop_process(sched, sched_log)
    gw_lines = (tmp_path / "gw.log").read_text().splitlines()
    assert any(json.loads(ln)["process"] == "gateway" for ln in gw_lines if ln.startswith("{"))


def test_access_lines_are_written_while_the_server_runs(tmp_path):
    """Access lines are written in batches, a moment after their requests, not
    held until the server stops."""
    served = Served(tmp_path / "data").start()
    try:
        r = requests.get(served.url + "/healthz", timeout=10,
                         headers={"X-Request-Id": "live-trace-0001"})
        assert r.status_code == 200
        wait_for(lambda: "live-trace-0001" in served.log_path.read_text(), timeout=5,
                 what="its access line, 5 s after the request at most")
    finally:
        served.stop()


def test_access_lines_are_batched_in_order_and_other_lines_go_out_at_once():
    import io
    import logging
    import threading

    from control_plane.infra.observability import BatchedStreamHandler

    stream = io.StringIO()
    # No batch goes out by time in this test: only when another line is written.
    handler = BatchedStreamHandler(stream, interval=60, batched="berth.test-access")
    handler.setFormatter(logging.Formatter("%(threadName)s %(message)s"))
    access, other = logging.getLogger("berth.test-access"), logging.getLogger("berth.test-other")
    for logger in (access, other):
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        def lines():
            for i in range(500):
                access.info("%d", i)

        threads = [threading.Thread(target=lines, name=f"t{n}") for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert stream.getvalue() == ""  # batched: nothing yet
        other.info("another logger's line")  # written at once, after everything before it
        written = stream.getvalue().splitlines()
        assert written[-1].endswith(" another logger's line") and len(written) == 8 * 500 + 1
        for n in range(8):
            assert [ln.split()[1] for ln in written if ln.startswith(f"t{n} ")] == [
                str(i) for i in range(500)]
        access.info("batched")
        access.warning("a warning")  # at once, even from the access logger
        assert stream.getvalue().splitlines()[-2:] == ["MainThread batched",
                                                       "MainThread a warning"]
        access.info("after")
        handler.flush()  # as logging's shutdown does at exit
        assert stream.getvalue().splitlines()[-1].endswith(" after")
    finally:
        for logger in (access, other):
            logger.removeHandler(handler)
        handler.close()
