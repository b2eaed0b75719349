"""What an environment's size is made of, as its agent last measured it (largest
tables, filestore files, missing and orphaned attachment files), and when its growth
was last alerted (services/servers/sizes.py)."""
from peewee import *


def up(migrator, db):
    migrator.migrate(migrator.add_column('environment', 'disk_made_of', TextField(null=True)),
                     migrator.add_column('environment', 'growth_alerted_at',
                                         DateTimeField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('environment', 'disk_made_of'),
                     migrator.drop_column('environment', 'growth_alerted_at'))
