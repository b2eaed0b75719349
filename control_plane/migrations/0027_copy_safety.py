"""What a copy restored into an environment must be (its neutralisation profile, and
whether it is anonymised), and whether the last one was anonymised: unset (standard,
not anonymised, not known) for every environment until then."""
from peewee import *


def up(migrator, db):
    migrator.migrate(
        migrator.add_column('environment', 'copy_profile', CharField(max_length=16, null=True)),
        migrator.add_column('environment', 'anonymize_copies', BooleanField(null=True)),
        migrator.add_column('environment', 'anonymized', BooleanField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('environment', 'copy_profile'),
                     migrator.drop_column('environment', 'anonymize_copies'),
                     migrator.drop_column('environment', 'anonymized'))
