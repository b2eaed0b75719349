import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField

PERMISSIONS = ("project.environments.deploy", "project.deployments.cancel",
               "project.environments.shell")
# What a user may do in the web console, as the two key types do on the public API.
USER_ACCESS = ("full_access", "read_only")


class Organization(BaseModel):
    name = peewee.CharField(max_length=255)
    server_quota = peewee.IntegerField(default=10)
    # Next support-ticket number; incremented inside the creating transaction.
    ticket_seq = peewee.IntegerField(default=0)


class User(BaseModel):
    organization = peewee.ForeignKeyField(Organization, backref="users")
    name = peewee.CharField(max_length=255)
    email = peewee.CharField(max_length=320)
    permissions = JSONField(default=list)
    # Users are soft-deleted: keys they created must be able to tell that
    # their owner is gone (409 key_has_no_owner).
    deleted_at = DateTimeField(null=True)
    access = peewee.CharField(max_length=16, default="full_access")
    # The web console's sign-in (services/accounts/sessions.py): an Argon2id hash, and
    # the TOTP secret sealed under CP_SECRET_KEY once the user has confirmed a code,
    # and the time step of the last code accepted (none of it or before is taken again).
    password_hash = peewee.CharField(max_length=255, null=True)
    totp_secret = peewee.TextField(null=True)
    totp_last_step = peewee.BigIntegerField(null=True)

    @property
    def read_only(self):
        return self.access == "read_only"


class UserToken(BaseModel):
    """Bearer token for the deployment-operations surface (stored as a digest)."""

    user = peewee.ForeignKeyField(User, backref="tokens")
    token_hash = peewee.CharField(max_length=64, unique=True)
    prefix = peewee.CharField(max_length=24)
    expires_at = DateTimeField(null=True)
    revoked_at = DateTimeField(null=True)


class WebSession(BaseModel):
    """A signed-in browser: the cookie carries the token, the row its digest."""

    user = peewee.ForeignKeyField(User, backref="web_sessions", on_delete="CASCADE")
    token_hash = peewee.CharField(max_length=64, unique=True)
    last_seen_at = DateTimeField()
    expires_at = DateTimeField()
    revoked_at = DateTimeField(null=True)
    ip = peewee.CharField(max_length=64, null=True)
    user_agent = peewee.CharField(max_length=255, null=True)
