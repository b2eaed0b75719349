"""Custom domains: a name is no longer unique across organizations while it is
pending (several environments may claim it; the first to prove it by DNS wins),
only once verified (a partial unique index); one environment still holds a
name once."""
from peewee import *


def up(migrator, db):
    migrator.migrate(migrator.drop_index('custom_domain', 'customdomain_name'))
    db.execute_sql('CREATE INDEX "customdomain_name" ON "custom_domain" ("name")')
    db.execute_sql('CREATE UNIQUE INDEX "customdomain_environment_id_name" '
                   'ON "custom_domain" ("environment_id", "name")')
    db.execute_sql('CREATE UNIQUE INDEX "customdomain_verified_name" '
                   'ON "custom_domain" ("name") WHERE "status" = \'verified\'')


def down(migrator, db):
    db.execute_sql('DROP INDEX "customdomain_verified_name"')
    db.execute_sql('DROP INDEX "customdomain_environment_id_name"')
    db.execute_sql('DROP INDEX "customdomain_name"')
    db.execute_sql('CREATE UNIQUE INDEX "customdomain_name" ON "custom_domain" ("name")')
