"""Each environment's backup policy (services/backups/policy.py): whether
scheduled backups are taken (NULL: the default of its type, on for
`production`), at what time of day (UTC), how many daily, weekly and monthly
copies are kept, and the scheduled slot last claimed by a scheduler."""
from peewee import *


def up(migrator, db):
    migrator.migrate(
        migrator.add_column('environment', 'backup_enabled', BooleanField(null=True)),
        migrator.add_column('environment', 'backup_time',
                            CharField(max_length=5, default='02:00')),
        migrator.add_column('environment', 'backup_keep_daily', IntegerField(default=7)),
        migrator.add_column('environment', 'backup_keep_weekly', IntegerField(default=4)),
        migrator.add_column('environment', 'backup_keep_monthly', IntegerField(default=3)),
        migrator.add_column('environment', 'backup_scheduled_for', DateTimeField(null=True)),
    )


def down(migrator, db):
    migrator.migrate(*(migrator.drop_column('environment', column) for column in (
        'backup_enabled', 'backup_time', 'backup_keep_daily', 'backup_keep_weekly',
        'backup_keep_monthly', 'backup_scheduled_for')))
