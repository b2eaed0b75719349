"""Metric history (services/servers/history.py): what agents report, kept as time
series. One row per subject, step and bucket: `step` 60 holds each minute's
average of the samples (`n` of them), `step` 3600 each hour's average, minimum and
maximum of its minutes. Kept 48 hours and 90 days (CP_METRICS_*_RETENTION_*).

Wide rows, one column per series, keyed by step, bucket start and subject, time
first: each minute's rows of every subject are written together at the end of
the table (keyed subject first, a flush would touch a page of every subject's),
and a subject's rows are read by naming their times. On SQLite a table without
row ids (migration 0022): the key is the row."""

import peewee

from control_plane.infra.db import database

SERVER_SERIES = ("cpu_percent", "memory_percent", "disk_percent",
                 "network_rx_bytes_per_second", "network_tx_bytes_per_second")
ENVIRONMENT_SERIES = ("erp_cpu_percent", "erp_memory_used_bytes", "postgres_cpu_percent",
                      "postgres_memory_used_bytes", "database_bytes", "filestore_bytes",
                      "addons_bytes",
                      # what the disk measurement counts (migration 0037)
                      "filestore_files", "attachments_missing", "files_orphaned")


def _columns(model, series):
    """Each series' average, and its minimum and maximum (null in minute rows)."""
    for name in series:
        for column in (name, f"{name}_min", f"{name}_max"):
            model._meta.add_field(column, peewee.FloatField(null=True))


class _Point(peewee.Model):
    step = peewee.SmallIntegerField()  # 60 or 3600 seconds
    at = peewee.BigIntegerField()  # the bucket's start, Unix seconds (UTC)
    n = peewee.IntegerField()  # samples averaged

    class Meta:
        database = database
        legacy_table_names = False


class ServerMetric(_Point):
    server_id = peewee.UUIDField()

    class Meta:
        primary_key = peewee.CompositeKey("step", "at", "server_id")


class EnvironmentMetric(_Point):
    environment_id = peewee.UUIDField()

    class Meta:
        primary_key = peewee.CompositeKey("step", "at", "environment_id")


_columns(ServerMetric, SERVER_SERIES)
_columns(EnvironmentMetric, ENVIRONMENT_SERIES)
