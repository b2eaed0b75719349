"""Commit statuses: a project's forge (its API and a token, sealed) and, per build,
the status last reported to it (services/webhooks/commit_statuses.py)."""
from peewee import *


def up(migrator, db):
    migrator.migrate(
        migrator.add_column('project', 'forge_provider', CharField(max_length=16, null=True)),
        migrator.add_column('project', 'forge_api_url', CharField(max_length=512, null=True)),
        migrator.add_column('project', 'forge_token', TextField(null=True)),
        migrator.add_column('build', 'status_reported', CharField(max_length=16, null=True)),
        migrator.add_column('build', 'status_attempts', IntegerField(default=0)),
        migrator.add_column('build', 'status_next_at', DateTimeField(null=True)),
        migrator.add_column('build', 'status_error', TextField(null=True)))


def down(migrator, db):
    migrator.migrate(
        migrator.drop_column('project', 'forge_provider'),
        migrator.drop_column('project', 'forge_api_url'),
        migrator.drop_column('project', 'forge_token'),
        migrator.drop_column('build', 'status_reported'),
        migrator.drop_column('build', 'status_attempts'),
        migrator.drop_column('build', 'status_next_at'),
        migrator.drop_column('build', 'status_error'))
