"""Whether a deploy whose module update fails reverts by itself: null (on, the
default) for every environment until turned off."""
from peewee import *


def up(migrator, db):
    migrator.migrate(migrator.add_column('environment', 'auto_revert',
                                         BooleanField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('environment', 'auto_revert'))
