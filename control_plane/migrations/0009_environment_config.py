"""Each environment's configuration (services/deploys/configuration.py): its
variables (secret values sealed), ERP options and PostgreSQL settings, and
when they last changed (JSON as text, like every JSON column)."""
from peewee import *

COLUMNS = ('variables', 'erp_options', 'postgres_settings')


def up(migrator, db):
    migrator.migrate(
        *(migrator.add_column('environment', column, TextField(null=True))
          for column in COLUMNS),
        migrator.add_column('environment', 'config_updated_at', DateTimeField(null=True)),
    )


def down(migrator, db):
    migrator.migrate(*(migrator.drop_column('environment', column)
                       for column in (*COLUMNS, 'config_updated_at')))
