"""Against the real `berth serve` process over a socket: the quick start,
concurrent writers on SQLite, concurrent duplicate idempotent requests."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.support.serve import Served

P = "/api/public/v1"


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path / "data")
    boot = s.admin("bootstrap")
    s.start()
    s.boot = boot
    yield s
    s.log_text = s.stop()


def test_quick_start_lists_projects_with_the_bootstrap_key(served):
    assert served.boot["created"] is True and served.boot["key"].startswith("svc_live_rw_")
    r = requests.get(served.url + P + "/projects",
                     headers={"Authorization": f"Bearer {served.boot['key']}"}, timeout=10)
    assert r.status_code == 200
    assert r.json() == {"data": [], "pagination": {"has_more": False, "next_cursor": None, "total": 0}}
    assert served.admin("bootstrap") == {"created": False}


@pytest.mark.slow
def test_sixteen_concurrent_writers_on_sqlite(served):
    org = served.boot["organization_id"]
    server = served.admin("server", "create", "--name", "s", "--provider", "p", "--cpu-cores", "2",
                          "--ram-mb", "2048", "--disk-gb", "20", "--org", org)["id"]
    keys = [served.admin("key", "create", "--org", org, "--name", f"w{i}", "--type", "full_access",
                         "--scope", "organization")["key"] for i in range(16)]
    stop_at = time.monotonic() + 4
    results, lock = [], threading.Lock()

    def writer(key):
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {key}"
        mine = []
        for n in range(20):  # the full-access limit: 20 per 60 s
            if time.monotonic() > stop_at:
                break
            r = session.post(served.url + P + "/projects",
                             json={"name": f"p-{key[-6:]}-{n}", "server_id": server}, timeout=30)
            mine.append((r.status_code, r.text if r.status_code != 201 else ""))
        with lock:
            results.extend(mine)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(writer, keys))
    failures = [r for r in results if r[0] != 201]
    assert not failures, failures[:5]
    assert len(results) >= 64
    total = requests.get(served.url + P + "/projects?limit=1",
                         headers={"X-API-Key": served.boot["key"]}, timeout=10).json()
    assert total["pagination"]["total"] == len(results)
    log = served.stop()
    assert "locked" not in log.lower() and "Traceback" not in log
    served.start()  # for the fixture's teardown


def test_concurrent_duplicates_create_one_project(served):
    org = served.boot["organization_id"]
    server = served.admin("server", "create", "--name", "s", "--provider", "p", "--cpu-cores", "2",
                          "--ram-mb", "2048", "--disk-gb", "20", "--org", org)["id"]
    headers = {"Authorization": f"Bearer {served.boot['key']}", "X-Idempotency-Key": "once"}
    barrier = threading.Barrier(8)

    def post(_):
        barrier.wait()
        r = requests.post(served.url + P + "/projects", headers=headers,
                          json={"name": "dup", "server_id": server}, timeout=30)
        return r.status_code, r.json(), r.headers.get("X-Idempotency-Replayed")

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(post, range(8)))
    created = [body["id"] for status, body, replayed in outcomes if status == 201]
    assert all(status in (201, 409) for status, _, _ in outcomes)
    assert all(body["error"] == "idempotency_key_in_use" for s, body, _ in outcomes if s == 409)
    assert len(set(created)) == 1
    listed = requests.get(served.url + P + "/projects",
                          headers={"X-API-Key": served.boot["key"]}, timeout=10).json()
    assert listed["pagination"]["total"] == 1
