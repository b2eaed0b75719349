"""What a failing post-deploy check does to a deploy: null (`enforce`: it fails and
reverts, the default) for every environment until set to `warn`."""
from peewee import *


def up(migrator, db):
    migrator.migrate(migrator.add_column('environment', 'post_deploy_checks',
                                         CharField(max_length=8, null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('environment', 'post_deploy_checks'))
