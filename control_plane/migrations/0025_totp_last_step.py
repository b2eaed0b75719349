"""The last TOTP time step a user's code was accepted at: a code of that step or an
earlier one is refused, so one code signs in once (services/accounts/totp.py)."""
from peewee import *


def up(migrator, db):
    migrator.migrate(migrator.add_column('user', 'totp_last_step', BigIntegerField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('user', 'totp_last_step'))
