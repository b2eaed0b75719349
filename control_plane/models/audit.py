import peewee

from control_plane.models.base import BaseModel, JSONField
from control_plane.models.org import Organization


class AuditEvent(BaseModel):
    """A change made through an API or the admin CLI (services/audit.py)."""

    organization = peewee.ForeignKeyField(Organization, on_delete="CASCADE", index=False)
    actor_type = peewee.CharField(max_length=16)  # api_key | user | operator
    actor_id = peewee.CharField(max_length=64, null=True)
    actor_name = peewee.CharField(max_length=255, null=True)
    action = peewee.CharField(max_length=64)  # e.g. project.update
    target_type = peewee.CharField(max_length=32)
    target_id = peewee.CharField(max_length=64, null=True)
    changes = JSONField(null=True)  # what was asked, secrets left out
    source_ip = peewee.CharField(max_length=64, null=True)
    request_id = peewee.CharField(max_length=64, null=True)

    class Meta:
        indexes = ((("organization", "created_at", "id"), False),)  # the org's list, newest first
