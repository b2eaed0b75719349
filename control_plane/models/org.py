import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField

PERMISSIONS = ("project.environments.deploy", "project.deployments.cancel")


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


class UserToken(BaseModel):
    """Bearer token for the deployment-operations surface (stored as a digest)."""

    user = peewee.ForeignKeyField(User, backref="tokens")
    token_hash = peewee.CharField(max_length=64, unique=True)
    prefix = peewee.CharField(max_length=24)
    expires_at = DateTimeField(null=True)
    revoked_at = DateTimeField(null=True)
