"""Fleet alerts (services/servers/alerts.py): each server's critical figures and
whether their events went out, and each environment's crash loop."""
from peewee import *


def up(migrator, db):
    migrator.migrate(
        migrator.add_column('server', 'disk_critical_since', DateTimeField(null=True)),
        migrator.add_column('server', 'disk_alerted', BooleanField(default=False)),
        migrator.add_column('server', 'memory_critical_since', DateTimeField(null=True)),
        migrator.add_column('server', 'memory_alerted', BooleanField(default=False)),
        migrator.add_column('server', 'down_alerted', BooleanField(default=False)),
        migrator.add_column('environment', 'crash_loop_since', DateTimeField(null=True)),
    )


def down(migrator, db):
    migrator.migrate(*[migrator.drop_column('server', c) for c in (
        'disk_critical_since', 'disk_alerted', 'memory_critical_since', 'memory_alerted',
        'down_alerted')], migrator.drop_column('environment', 'crash_loop_since'))
