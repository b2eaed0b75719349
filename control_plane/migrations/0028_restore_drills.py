"""Weekly restore drills: whether an environment has them (unset: production does)
and when the last scheduled one started."""
from peewee import *


def up(migrator, db):
    migrator.migrate(
        migrator.add_column('environment', 'drill_enabled', BooleanField(null=True)),
        migrator.add_column('environment', 'drill_scheduled_for', DateTimeField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('environment', 'drill_enabled'),
                     migrator.drop_column('environment', 'drill_scheduled_for'))
