"""The reverse proxy's state on each server as its agent last reported it
(health, each routed name's certificate), JSON as text."""
from peewee import *


def up(migrator, db):
    migrator.migrate(migrator.add_column('server', 'proxy_state', TextField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('server', 'proxy_state'))
