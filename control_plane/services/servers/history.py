"""Metric history: the figures agents report, kept as time series
(models/metrics.py), and read back by range and step.

- Recording: a heartbeat leaves only a reference to itself on its stream's
  session (the latest with host metrics, the latest with the environments'
  figures, which the agent sends once a minute with their CPU over that minute).
  Every CP_METRICS_FLUSH_SECONDS the gateway takes from each session the samples
  of minutes not yet written (gateway/messages.history_rows) and writes them
  (`write`): one sample a subject and minute. Gathering rows at each heartbeat
  cost the gateway more than writing them (docs/performance.md). A minute written
  twice (a stream that moved to another gateway within it) is merged: averages
  weighted by samples.
- The scheduler's `metric-history` job (`sweep`) rolls finished hours of minutes
  into hour rows (average, minimum and maximum of the minutes), recomputing the
  last hours so that a late minute counts, and deletes rows past their retention.
- Reading (`read`): points of a step from 1 minute to 1 day; steps under an hour
  from minute rows, longer ones from hour rows and, for the hours not yet rolled
  up, from minutes. A bucket with no samples is left out, not sent as nulls."""

import datetime as dt
import io
import struct
import time

from control_plane.infra import clock
from control_plane.infra.db import database, is_sqlite
from control_plane.models.metrics import ENVIRONMENT_SERIES, SERVER_SERIES
from control_plane.services.environment_settings import access
from control_plane.services.servers import monitoring

MINUTE, HOUR = 60, 3600
STEPS = {"1m": 60, "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "1d": 86400}
MAX_POINTS = 1500  # a range over `step` may hold at most this many points
ROWS_PER_STATEMENT = 400
RECOMPUTED_HOURS = 2  # the last rolled-up hours computed again (late minutes)
KINDS = {"server": ("server_metric", "server_id", SERVER_SERIES),
         "environment": ("environment_metric", "environment_id", ENVIRONMENT_SERIES)}


def unix(moment):
    """Seconds since the epoch of a naive-UTC datetime."""
    return int(moment.replace(tzinfo=dt.UTC).timestamp())


def minute_now():
    return int(time.time()) // MINUTE * MINUTE


def write(rows):
    """Store the gateway's samples: (kind, subject id hex, server id hex, minute,
    samples, averages in series order). Environment rows count only for the
    environments placed on the server whose agent sent them."""
    by_kind = {"server": {}, "environment": {}}
    for row in rows:
        # Once a subject and minute a statement (PostgreSQL refuses a row updated
        # twice by one): two streams of one server for a moment give two. Nested
        # dicts keyed by the minute and the id: a tuple key for each of thousands of
        # rows woke the garbage collector, most of what the write cost the gateway.
        by_kind[row[0]].setdefault(row[3], {}).setdefault(row[1], row)
    store = _statements if is_sqlite() else _copied
    with database.atomic():
        for kind, minutes in by_kind.items():
            if minutes:  # in key order: appended at the end of the table
                store(kind, [minutes[m][s] for m in sorted(minutes) for s in sorted(minutes[m])])


def _statements(kind, points):
    """SQLite: multi-row upserts, a few hundred rows each."""
    table, key, series = KINDS[kind]
    if kind == "environment":
        placed = _placed({row[2] for row in points})
        points = [row for row in points if (row[1], row[2]) in placed]
    for i in range(0, len(points), ROWS_PER_STATEMENT):
        chunk = points[i:i + ROWS_PER_STATEMENT]
        database.execute_sql(_upsert(table, key, series, len(chunk)), [
            value for _, subject, _, minute, n, averages in chunk
            for value in (subject, MINUTE, minute, n, *map(_storable, averages))])


def _storable(figure):
    """A figure as both databases store it: None when not taken (None, or the
    agent's -1: no figure is negative), NaN, an infinity or beyond REAL's range
    (PostgreSQL's column; SQLite's holds more)."""
    return figure if figure is not None and 0 <= figure <= FIGURE_MAX else None


def _copied(kind, points):
    """PostgreSQL: the rows as binary COPY into a temporary table, merged from there
    by one upsert; environments not on the sending server are left out there, by the
    database. psycopg2 adapting each of a minute's ~165,000 parameters cost the
    gateway three times the CPU of COPY text, and formatting that text (each float's
    shortest repr) more than packing the rows (docs/performance.md)."""
    table, key, series = KINDS[kind]
    incoming = f"incoming_{table}"
    columns = ", ".join((key, "step", "at", "n", *series, "sender"))
    cursor = database.cursor()
    cursor.execute(f"CREATE TEMPORARY TABLE {incoming} (LIKE {table}, sender UUID) "
                   "ON COMMIT DROP")
    cursor.copy_expert(f"COPY {incoming} ({columns}) FROM STDIN (FORMAT binary)",
                       io.BytesIO(_binary(points, len(series))))
    if kind == "environment":
        cursor.execute(f"DELETE FROM {incoming} WHERE NOT EXISTS (SELECT 1 FROM environment "
                       f"WHERE id = {incoming}.{key} AND server_id = {incoming}.sender)")
    cursor.execute(_upsert(table, key, series, source=incoming))


# PostgreSQL's binary COPY: a header, then each row as its field count and each field
# as its length (-1: null) and bytes, big-endian; -1 for a field count ends it.
COPY_HEADER, COPY_END = b"PGCOPY\n\xff\r\n\x00" + bytes(8), b"\xff\xff"
NAN = float("nan")
FIGURE_MAX = 3.4028234663852886e38  # REAL's largest


def _binary(points, figures):
    """The rows (subject, step, at, n, figures as REAL, sender) as COPY's binary
    format, each in one pack. A figure not to be stored (None, negative, NaN, an
    infinity, out of range: `_storable`) goes as NaN, which the merge reads as null
    (`_upsert`): a null's own layout would need a pack a figure."""
    row = struct.Struct(">hi16sihiqii" + "if" * figures + "i16s")
    args = [5 + figures, 16, b"", 2, MINUTE, 8, 0, 4, 0, *[4, 0.0] * figures, 16, b""]
    last = len(args) - 1
    out = [COPY_HEADER]
    for _, subject, server, minute, n, averages in points:
        args[2], args[6], args[8] = bytes.fromhex(subject), minute, n
        args[last] = bytes.fromhex(server)
        # No None, none negative and their sum in range: no NaN or infinity either.
        # (Tested before summing: rows with a figure not taken are common.)
        if None in averages or not (sum(averages) <= FIGURE_MAX and min(averages) >= 0):
            averages = [NAN if (v := _storable(x)) is None else v for x in averages]
        args[10:last:2] = averages
        out.append(row.pack(*args))
    out.append(COPY_END)
    return b"".join(out)


def _placed(servers):
    """{(environment id hex, server id hex)} of the environments on `servers` (raw SQL:
    it runs at every flush, for every server that beat)."""
    servers, found = list(servers), set()
    for i in range(0, len(servers), ROWS_PER_STATEMENT):
        chunk = servers[i:i + ROWS_PER_STATEMENT]
        # As hex text (no UUID object made for each of thousands of rows).
        rows = database.execute_sql(
            "SELECT REPLACE(CAST(id AS TEXT), '-', ''), REPLACE(CAST(server_id AS TEXT), "
            f"'-', '') FROM environment WHERE server_id IN "
            f"({', '.join([database.param] * len(chunk))})", chunk).fetchall()
        found.update(rows)
    return found


_SQL = {}


def _upsert(table, key, series, rows=0, source=None):
    """`rows` rows of parameters, or every row of the table `source`, merged in."""
    cached = (type(database.obj), table, rows, source)
    sql = _SQL.get(cached)
    if sql is None:
        p = database.param
        columns = (key, "step", "at", "n", *series)
        copied = (key, "step", "at", "n", *(f"NULLIF({s}, 'NaN')" for s in series))
        values = (f"SELECT {', '.join(copied)} FROM {source}" if source else
                  "VALUES " + ", ".join(["(" + ", ".join([p] * len(columns)) + ")"] * rows))
        merged = ", ".join(
            f"{s} = CASE WHEN excluded.{s} IS NULL THEN {table}.{s} "
            f"WHEN {table}.{s} IS NULL THEN excluded.{s} "
            f"ELSE ({table}.{s} * {table}.n + excluded.{s} * excluded.n) "
            f"/ ({table}.n + excluded.n) END" for s in series)
        sql = _SQL[cached] = (
            f"INSERT INTO {table} ({', '.join(columns)}) {values} "
            f"ON CONFLICT (step, at, {key}) DO UPDATE SET n = {table}.n + excluded.n, {merged}")
    return sql


# --- the scheduler's job ---------------------------------------------------------


def sweep(berth, now=None):
    """Roll finished hours up, delete rows past their retention. Safe to run in
    several schedulers at once: a roll-up recomputes whole hours and replaces them."""
    now = unix(now or clock.now())
    keep_minutes = now - int(berth.settings["METRICS_MINUTE_RETENTION_HOURS"]) * HOUR
    keep_hours = now - int(berth.settings["METRICS_HOUR_RETENTION_DAYS"]) * 86400
    hour = now // HOUR * HOUR
    p = database.param
    for table, key, series in KINDS.values():
        last = database.execute_sql(
            f"SELECT MAX(at) FROM {table} WHERE step = {HOUR}").fetchone()[0]
        # From the last hours rolled up (all minutes the first time): minutes past
        # their retention are rolled up before they go, however long no job ran.
        start = 0 if last is None else last - RECOMPUTED_HOURS * HOUR
        with database.atomic():
            database.execute_sql(_rollup(table, key, series), [start, hour])
            database.execute_sql(f"DELETE FROM {table} WHERE step = {MINUTE} AND at < {p}",
                                 [keep_minutes])
            database.execute_sql(f"DELETE FROM {table} WHERE step = {HOUR} AND at < {p}",
                                 [keep_hours])


def _rollup(table, key, series):
    p = database.param
    figures = ", ".join(f"{_mean(s)}, MIN({s}), MAX({s})" for s in series)
    columns = ", ".join(f"{s}, {s}_min, {s}_max" for s in series)
    replaced = ", ".join(f"{c} = excluded.{c}" for s in series
                         for c in (s, f"{s}_min", f"{s}_max"))
    return (f"INSERT INTO {table} ({key}, step, at, n, {columns}) "
            f"SELECT {key}, {HOUR}, at / {HOUR} * {HOUR}, SUM(n), {figures} FROM {table} "
            f"WHERE step = {MINUTE} AND at >= {p} AND at < {p} "
            f"GROUP BY {key}, at / {HOUR} * {HOUR} "
            f"ON CONFLICT (step, at, {key}) DO UPDATE SET n = excluded.n, {replaced}")


def _mean(s):
    """The average of the rows' averages, each weighted by its samples."""
    return f"SUM({s} * n) / SUM(CASE WHEN {s} IS NULL THEN NULL ELSE n END)"


# --- reading -----------------------------------------------------------------------


def read(kind, subject_id, start, end, step):
    """[{"at": datetime, series: {"avg", "min", "max"}}] of `subject_id` in [start,
    end) by `step` seconds (one of STEPS' values), oldest first.

    Rows are keyed time first (written at the end of the table, minute after
    minute), so a subject's rows are found by naming each of their times: one
    seek each, at most a few thousand."""
    table, key, series = KINDS[kind]
    p, subject = database.param, subject_id.hex
    first, last = unix(start) // step * step, unix(end)
    spreads = ", ".join(f"{_mean(s)}, MIN({s}_min), MAX({s}_max)" for s in series)
    bucket = f"at / {step} * {step}"  # integer division on both databases
    minutes = ", ".join(f"{s}, {s} AS {s}_min, {s} AS {s}_max" for s in series)
    if step < HOUR:
        source = (f"SELECT at, n, {minutes} FROM {table} "
                  f"WHERE step = {MINUTE} AND at IN ({_times(first, last, MINUTE)}) "
                  f"AND {key} = {p}")
        params = [subject]
    else:  # hours rolled up, then the minutes of those that are not yet
        rolled = database.execute_sql(
            f"SELECT MAX(at) FROM {table} WHERE step = {HOUR}").fetchone()[0]
        cutoff = HOUR + rolled if rolled is not None else 0
        hours = ", ".join(f"{s}, {s}_min, {s}_max" for s in series)
        source = (f"SELECT at, n, {hours} FROM {table} WHERE step = {HOUR} "
                  f"AND at IN ({_times(first, min(last, cutoff), HOUR)}) AND {key} = {p} "
                  f"UNION ALL SELECT at, n, {minutes} FROM {table} WHERE step = {MINUTE} "
                  f"AND at IN ({_times(max(first, cutoff), last, MINUTE)}) AND {key} = {p}")
        params = [subject, subject]
    rows = database.execute_sql(
        f"SELECT {bucket} AS bucket, {spreads} FROM ({source}) AS points "
        f"GROUP BY {bucket} ORDER BY bucket", params).fetchall()
    return [_point(row, series) for row in rows]


def _times(first, last, step):
    """The bucket starts in [first, last) as SQL (integers we made, not input)."""
    first = -(-first // step) * step
    return ", ".join(str(t) for t in range(first, last, step)) or "NULL"


def _point(row, series):
    point = {"at": dt.datetime.fromtimestamp(row[0], dt.UTC).replace(tzinfo=None)}
    for i, name in enumerate(series):
        point[name] = dict(zip(("avg", "min", "max"),
                               (_figure(name, v) for v in row[1 + 3 * i:4 + 3 * i]),
                               strict=True))
    return point


def _figure(name, value):
    if value is None:
        return None
    return round(value) if name.endswith("_bytes") else round(value, 2)


def server_history(actor, server_id, start, end, step):
    server = monitoring.own_server(actor, server_id)
    return {"server_id": server.id, "from": start, "to": end, "step": _step_name(step),
            "points": read("server", server.id, start, end, step)}


def environment_history(actor, environment_id, start, end, step):
    env = access.environment(actor, environment_id)
    return {"environment_id": env.id, "from": start, "to": end, "step": _step_name(step),
            "points": read("environment", env.id, start, end, step)}


def _step_name(seconds):
    return next(name for name, s in STEPS.items() if s == seconds)
