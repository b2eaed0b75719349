"""Notification channels: a subscription's channel type (null for an outgoing
webhook) and its settings that are not secret."""
from peewee import *


def up(migrator, db):
    migrator.migrate(
        migrator.add_column('webhook', 'channel', CharField(max_length=8, null=True)),
        migrator.add_column('webhook', 'options', TextField(null=True)))


def down(migrator, db):
    # Channels would become broken webhooks: they and their deliveries go first.
    db.execute_sql('DELETE FROM webhook_delivery WHERE webhook_id IN '
                   '(SELECT id FROM webhook WHERE channel IS NOT NULL)')
    db.execute_sql('DELETE FROM webhook WHERE channel IS NOT NULL')
    migrator.migrate(migrator.drop_column('webhook', 'channel'),
                     migrator.drop_column('webhook', 'options'))
