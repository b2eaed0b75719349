"""Notification channels: a subscription's channel type (null for an outgoing
webhook) and its settings that are not secret."""
from peewee import *


def up(migrator, db):
    migrator.migrate(
        migrator.add_column('webhook', 'channel', CharField(max_length=8, null=True)),
        migrator.add_column('webhook', 'options', TextField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('webhook', 'channel'),
                     migrator.drop_column('webhook', 'options'))
