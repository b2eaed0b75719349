"""The web console's sign-in: users' access, password hash and TOTP secret, and
the sessions of signed-in browsers (services/accounts/sessions.py)."""
from peewee import *
import uuid


def up(migrator, db):
    class User(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        class Meta:
            database = db
            table_name = 'user'

    class WebSession(Model):
        id = UUIDField(primary_key=True, default=uuid.uuid4)
        created_at = DateTimeField(index=True)
        user = ForeignKeyField(User, on_delete='CASCADE')
        token_hash = CharField(max_length=64, unique=True)
        last_seen_at = DateTimeField()
        expires_at = DateTimeField()
        revoked_at = DateTimeField(null=True)
        ip = CharField(max_length=64, null=True)
        user_agent = CharField(max_length=255, null=True)
        class Meta:
            database = db
            table_name = 'web_session'

    migrator.migrate(
        migrator.add_column('user', 'access', CharField(max_length=16, default='full_access')),
        migrator.add_column('user', 'password_hash', CharField(max_length=255, null=True)),
        migrator.add_column('user', 'totp_secret', TextField(null=True)),
    )
    db.create_tables([WebSession])


def down(migrator, db):
    db.execute_sql('DROP TABLE web_session')
    migrator.migrate(*(migrator.drop_column('user', column)
                       for column in ('access', 'password_hash', 'totp_secret')))
