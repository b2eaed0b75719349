"""Each task's time limit, fixed by its kind when it starts (the reaper reads it):
30 minutes, or 3 hours for the tasks that move whole databases (backups,
restores, exports, and deploys that take a pre-deploy backup first). Tasks
still pending or running get the limit their kind gave them before."""
from peewee import *


def up(migrator, db):
    migrator.migrate(migrator.add_column('deployment', 'time_limit_minutes',
                                         IntegerField(default=30)))
    db.execute_sql(
        "UPDATE deployment SET time_limit_minutes = 180 "
        "WHERE status IN ('pending', 'running') AND (kind IN ('backup', 'restore', 'export') "
        "OR id IN (SELECT task_id FROM backup "
        "WHERE backup_type = 'pre_deploy' AND task_id IS NOT NULL))")


def down(migrator, db):
    migrator.migrate(migrator.drop_column('deployment', 'time_limit_minutes'))
