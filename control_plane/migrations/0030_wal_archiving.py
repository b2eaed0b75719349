"""WAL archiving: each environment's archived WAL files, the agent's last report
of its archiving with when it was alerted as failing, and the last gap found in
its archive."""
from peewee import *
import uuid


def up(migrator, db):
    class Environment(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'environment'

    class WalFile(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        environment = ForeignKeyField(Environment, on_delete='CASCADE')
        name = CharField(max_length=64)
        key = CharField(max_length=512)
        upload_id = CharField(max_length=1024, null=True)
        size = BigIntegerField(null=True)
        sha256 = CharField(max_length=64, null=True)
        stored_at = DateTimeField(null=True, index=True)
        class Meta:
            database = db
            table_name = 'wal_file'
            indexes = ((('environment', 'name'), True),)

    db.create_tables([WalFile])
    migrator.migrate(
        migrator.add_column('environment', 'wal_report', TextField(null=True)),
        migrator.add_column('environment', 'wal_reported_at', DateTimeField(null=True)),
        migrator.add_column('environment', 'wal_alerted_at', DateTimeField(null=True)),
        migrator.add_column('environment', 'wal_gap', CharField(max_length=128, null=True)),
        migrator.add_column('environment', 'wal_gap_at', DateTimeField(null=True)))


def down(migrator, db):
    migrator.migrate(migrator.drop_column('environment', 'wal_report'),
                     migrator.drop_column('environment', 'wal_reported_at'),
                     migrator.drop_column('environment', 'wal_alerted_at'),
                     migrator.drop_column('environment', 'wal_gap'),
                     migrator.drop_column('environment', 'wal_gap_at'))
    db.execute_sql('DROP TABLE wal_file')
