"""Preview environments (services/automation/previews.py): the rule that made an
environment for a branch, and when that branch was last pushed."""
from peewee import *


def up(migrator, db):
    migrator.migrate(
        migrator.add_column('environment', 'preview_rule', UUIDField(null=True, index=True)),
        migrator.add_column('environment', 'last_pushed_at', DateTimeField(null=True)),
    )


def down(migrator, db):
    migrator.migrate(migrator.drop_column('environment', 'preview_rule'),
                     migrator.drop_column('environment', 'last_pushed_at'))
