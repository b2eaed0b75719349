"""The ERP modules an environment's deploys install when its database lacks them
(Odoo.sh's "install a list of modules"): null, none, for every environment
(JSON as text, like every JSON column)."""
from peewee import *


def up(migrator, db):
    migrator.migrate(migrator.add_column('environment', 'install_modules',
                                         TextField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('environment', 'install_modules'))
