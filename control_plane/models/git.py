"""Deploy on git push: add-on repositories, per-project webhook secrets, and the
record of each handled push delivery."""

import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.project import Project


class AddonRepository(BaseModel):
    """A Git repository of extra add-ons, checked out next to the project's code."""

    project = peewee.ForeignKeyField(Project, backref="addon_repositories", on_delete="CASCADE")
    url = peewee.CharField(max_length=2048)
    # `owner/name` in lower case, matched against a push's repository.full_name.
    full_name = peewee.CharField(max_length=255, index=True)
    branch = peewee.CharField(max_length=255, default="main")
    auto_deploy = peewee.BooleanField(default=True)
    is_active = peewee.BooleanField(default=True)
    updated_at = DateTimeField(null=True)

    class Meta:
        indexes = ((("project", "full_name"), True),)


class GitWebhookSecret(BaseModel):
    """The secret a project's Git host signs push webhooks with. Stored encrypted
    (computing the HMAC needs the secret itself), shown once when made."""

    project = peewee.ForeignKeyField(Project, unique=True, on_delete="CASCADE")
    secret_encrypted = peewee.TextField()
    rotated_at = DateTimeField(null=True)


class GitDelivery(BaseModel):
    """A push delivery handled for a project: a repeated delivery id answers
    with `result` and does nothing (the unique index settles concurrent ones)."""

    project = peewee.ForeignKeyField(Project, on_delete="CASCADE")
    provider = peewee.CharField(max_length=16)
    delivery_id = peewee.CharField(max_length=255)
    event = peewee.CharField(max_length=64)
    result = JSONField(null=True)

    class Meta:
        indexes = ((("project", "provider", "delivery_id"), True),)
