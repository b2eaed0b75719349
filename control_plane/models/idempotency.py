import peewee

from control_plane.models.api_key import ApiKey
from control_plane.models.base import BaseModel, DateTimeField, JSONField


class IdempotencyRecord(BaseModel):
    api_key = peewee.ForeignKeyField(ApiKey, on_delete="CASCADE")
    key = peewee.CharField(max_length=255)
    method = peewee.CharField(max_length=8)
    path = peewee.CharField(max_length=2048)
    # in_flight until the first request finishes; then done with its response.
    state = peewee.CharField(max_length=16, default="in_flight")
    locked_until = DateTimeField(null=True)
    expires_at = DateTimeField(index=True)
    response_status = peewee.IntegerField(null=True)
    response_body = peewee.TextField(null=True)
    response_headers = JSONField(null=True)

    class Meta:
        indexes = ((("api_key", "key"), True),)
