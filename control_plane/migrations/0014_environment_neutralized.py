"""Whether an environment's database is neutralised (Odoo's `database.is_neutralized`),
as its agent read it after a restore: unknown (null) for every environment until then."""
from peewee import *


def up(migrator, db):
    migrator.migrate(migrator.add_column('environment', 'neutralized', BooleanField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('environment', 'neutralized'))
