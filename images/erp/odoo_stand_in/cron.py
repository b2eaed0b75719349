"""Odoo's cron runner (`max_cron_threads` above 0, the server only): every scheduled
action that is active and due (its `nextcall` passed, or an `ir_cron_trigger` of it
whose `call_at` passed) runs, which sets its `lastcall` to now and moves `nextcall`
past now by its interval. It looks every TICK seconds, and at once when woken by
`NOTIFY cron_trigger` (what Odoo sends when a trigger is added). A job does nothing
here but be called."""

import logging
import select
import threading

import psycopg2

TICK = 60  # seconds, Odoo's SLEEP_INTERVAL
UNITS = {"minutes": "minute", "hours": "hour", "days": "day", "weeks": "week",
         "months": "month"}
log = logging.getLogger("odoo.service.server")
job_log = logging.getLogger("odoo.addons.base.models.ir_cron")


def run_due(cr):
    """The due jobs called; returns their names."""
    cr.execute("SELECT id, name, interval_number, interval_type FROM ir_cron WHERE active AND"
               " (nextcall <= now() at time zone 'UTC' OR id IN (SELECT cron_id FROM"
               " ir_cron_trigger WHERE call_at <= now() at time zone 'UTC')) ORDER BY id"
               " FOR UPDATE SKIP LOCKED")
    called = []
    for job_id, name, number, unit in cr.fetchall():
        job_log.info("Job '%s' (%s) starting", name, job_id)
        step = f"{max(number, 1)} {UNITS.get(unit, 'hour')}"
        cr.execute("UPDATE ir_cron SET lastcall = now() at time zone 'UTC', nextcall ="
                   " nextcall + %s::interval * greatest(1, ceil(extract(epoch FROM"
                   " (now() at time zone 'UTC' - nextcall)) / extract(epoch FROM"
                   " %s::interval))) WHERE id = %s", (step, step, job_id))
        cr.execute("DELETE FROM ir_cron_trigger WHERE cron_id = %s"
                   " AND call_at <= now() at time zone 'UTC'", (job_id,))
        job_log.info("Job '%s' (%s) done", name, job_id)
        called.append(name)
    return called


def runner(db, stop):
    """The cron thread: due jobs run, then a wait for TICK or a notification."""
    while not stop.is_set():
        try:
            conn = db.connect()
        except psycopg2.Error as exc:
            log.warning("cron: database %s unreachable: %s", db.s["db_name"], str(exc).strip())
            stop.wait(TICK)
            continue
        try:
            with conn, conn.cursor() as cr:  # listening from the commit on
                cr.execute("LISTEN cron_trigger")
            while not stop.is_set():
                with conn, conn.cursor() as cr:
                    run_due(cr)
                conn.notifies.clear()
                select.select([conn], [], [], TICK)
                conn.poll()
        except psycopg2.Error as exc:
            log.warning("cron: %s", str(exc).strip())
            stop.wait(1)
        finally:
            conn.close()


def start(db):
    """The runner's thread started (a daemon: the server's end ends it)."""
    stop = threading.Event()
    threading.Thread(target=runner, args=(db, stop), daemon=True, name="cron0").start()
    log.info("cron0 started!")
    return stop
