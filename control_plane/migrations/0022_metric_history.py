"""Metric history (services/servers/history.py): servers' and environments' figures
by minute and by hour."""
from peewee import *

SERVER = ("cpu_percent", "memory_percent", "disk_percent",
          "network_rx_bytes_per_second", "network_tx_bytes_per_second")
ENVIRONMENT = ("erp_cpu_percent", "erp_memory_used_bytes", "postgres_cpu_percent",
               "postgres_memory_used_bytes", "database_bytes", "filestore_bytes",
               "addons_bytes")


def _table(db, name, subject, series):
    sqlite = isinstance(getattr(db, 'obj', db), SqliteDatabase)

    class Point(Model):
        step = SmallIntegerField()
        at = BigIntegerField()
        n = IntegerField()

        class Meta:
            database = db
            table_name = name
            without_rowid = sqlite  # the key is the row: stored once
            primary_key = CompositeKey('step', 'at', subject)

    Point._meta.add_field(subject, UUIDField())
    for s in series:
        for column in (s, f'{s}_min', f'{s}_max'):
            Point._meta.add_field(column, FloatField(null=True))
    return Point


def up(migrator, db):
    db.create_tables([_table(db, 'server_metric', 'server_id', SERVER),
                      _table(db, 'environment_metric', 'environment_id', ENVIRONMENT)])


def down(migrator, db):
    db.execute_sql('DROP TABLE environment_metric')
    db.execute_sql('DROP TABLE server_metric')
