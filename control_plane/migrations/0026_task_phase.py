"""A task remembers its environment's status before it began (a cancel, or a
failure that changed nothing, puts it back), and when its time limit started
counting: a deploy's 30 minutes start when its pre-deploy backup is done."""
from peewee import *


def up(migrator, db):
    migrator.migrate(
        migrator.add_column('deployment', 'environment_status_before',
                            CharField(max_length=16, null=True)),
        migrator.add_column('deployment', 'phase_started_at', DateTimeField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('deployment', 'environment_status_before'),
                     migrator.drop_column('deployment', 'phase_started_at'))
