"""Benchmark: outgoing webhook fan-out and delivery end to end.

Events are written to the outbox the way the services write them
(`record_event`, committed in batches); the real scheduler loop (`jobs()`, in a
thread, as in `berth serve`) fans them out and delivers them to a local HTTPS
receiver (the test receiver, trusted CA, WEBHOOK_ALLOW_PRIVATE) running in its
own process. Two phases, 1,000 events each:

- burst: all at once (50 per transaction): deliveries per second, first commit to
  last receipt;
- steady: 200 events per second: end-to-end lag (event committed -> received).

Each phase checks that every event arrived (exactly once) and that every delivery
row ended `delivered`. Target: at least 200 deliveries/s in the burst. Prints PASS
and exits 0, or prints FAIL and exits 1.

    python benchmarks/webhook_fanout.py [--events 1000] [--rate 200] [--target 200]
                                        [--backend-url URL]
"""

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TARGET = 200  # deliveries per second
BATCH = 50


def receiver_process(conn):
    """The real HTTPS test receiver in its own process: answers 200, records receipts."""
    from tests.support.webhook_receiver import Receiver, _ca

    ca, ca_path = _ca()
    receiver = Receiver(ca)
    conn.send((receiver.url, ca_path))
    while True:
        msg = conn.recv()
        if msg == "count":
            conn.send(len(receiver.requests))
        elif msg == "take":
            got = [(json.loads(r.body)["event_id"], r.time) for r in receiver.requests]
            receiver.reset()
            conn.send(got)
        else:
            receiver.close()
            return


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def produce(org, project, n, rate):
    """n events, committed BATCH at a time (paced to `rate` events/s if given):
    {event_id: commit time}."""
    from control_plane import events
    from control_plane.db import database

    created, started = {}, time.time()
    for i in range(0, n, BATCH):
        if rate:
            delay = started + i / rate - time.time()
            if delay > 0:
                time.sleep(delay)
        with database.atomic():
            ids = [str(events.record_event(org.id, project.id, events.Name.DEPLOY_COMPLETED, {
                "environment_id": "bench", "project_id": str(project.id), "task_id": str(j),
                "status": "completed", "duration_seconds": 1}).event_id)
                for j in range(i, min(n, i + BATCH))]
        now = time.time()
        created.update(dict.fromkeys(ids, now))
    return created


def phase(name, conn, org, project, n, rate):
    from control_plane.models import WebhookDelivery

    conn.send("take")
    conn.recv()
    created = produce(org, project, n, rate)
    deadline = time.time() + 120
    while time.time() < deadline:
        conn.send("count")
        if conn.recv() >= n:
            break
        time.sleep(0.05)
    conn.send("take")
    got = conn.recv()
    received = {}
    for eid, at in got:
        received.setdefault(eid, at)
    lost = set(created) - set(received)
    dupes = len(got) - len(received)
    lags = [received[e] - created[e] for e in created if e in received]
    span = max(received.values()) - min(created.values()) if received else float("nan")
    deadline = time.time() + 30  # the last outcomes are being recorded
    while (pending := WebhookDelivery.select().where(
            WebhookDelivery.status != "delivered").count()) and time.time() < deadline:
        time.sleep(0.05)
    return {"phase": name, "events": n, "received": len(received), "lost": len(lost),
            "duplicates": dupes, "not_delivered_rows": pending,
            "deliveries_per_s": len(received) / span if span else float("nan"),
            "lag_p50_ms": statistics.median(lags) * 1000 if lags else float("nan"),
            "lag_p99_ms": percentile(lags, 99) * 1000 if lags else float("nan")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=200, help="steady phase, events/s")
    parser.add_argument("--target", type=float, default=TARGET,
                        help="burst deliveries/s needed to pass")
    parser.add_argument("--backend-url", default=None, help="CP_DATABASE_URL (default SQLite)")
    args = parser.parse_args()

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=receiver_process, args=(child,),
                       daemon=True)
    proc.start()
    url, ca_path = parent.recv()

    from control_plane import events, migrate, scheduler, secretbox
    from control_plane.app import create_app
    from control_plane.models import Project, Webhook
    from control_plane.services.accounts import orgs
    from control_plane.services.webhooks import subscriptions

    data_dir = tempfile.mkdtemp(prefix="berth-bench-webhooks-")
    settings = {"DATA_DIR": data_dir, "SECRET_KEY": "bench", "WEBHOOK_ALLOW_PRIVATE": True,
                "WEBHOOK_CA_BUNDLE": ca_path}
    if args.backend_url:
        settings["DATABASE_URL"] = args.backend_url
    app = create_app(settings)
    migrate.upgrade(app.extensions["berth"].db)
    settings = app.extensions["berth"].settings
    org = orgs.create_org(f"bench-{os.getpid()}")
    project = Project.create(organization=org, name="bench", default_branch="main")
    Webhook.create(organization=org, url=url + "/hook", events=[events.Name.DEPLOY_COMPLETED.value],
                   secret_encrypted=secretbox.seal(subscriptions.new_secret(),
                                                   subscriptions.SECRET_PURPOSE))
    sched = scheduler.Scheduler(scheduler.jobs(settings)).start_in_thread()
    try:
        rows = [phase("burst", parent, org, project, args.events, None),
                phase(f"steady {args.rate}/s", parent, org, project, args.events, args.rate)]
    finally:
        sched.stop()
        parent.send("stop")
        proc.join(10)
        shutil.rmtree(data_dir, ignore_errors=True)
    cols = ["phase", "events", "received", "lost", "duplicates", "not_delivered_rows",
            "deliveries_per_s", "lag_p50_ms", "lag_p99_ms"]
    print(" | ".join(f"{c:>18}" for c in cols))
    for row in rows:
        print(" | ".join(f"{row[c]:>18.1f}" if isinstance(row[c], float) else f"{row[c]:>18}"
                         for c in cols))
    rate = rows[0]["deliveries_per_s"]
    ok = rate >= args.target and all(
        r["lost"] == 0 and r["duplicates"] == 0 and r["not_delivered_rows"] == 0 for r in rows)
    print(f"{'PASS' if ok else 'FAIL'}: {rate:.0f} deliveries/s (target >= {args.target:g}), "
          f"{sum(r['lost'] for r in rows)} event(s) lost")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
