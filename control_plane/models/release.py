import peewee

from control_plane.models.base import BaseModel, JSONField


class Release(BaseModel):
    version = peewee.CharField(max_length=32, unique=True)
    # Numeric parts so that ordering and `since_version` compare as versions.
    major = peewee.IntegerField()
    minor = peewee.IntegerField()
    patch = peewee.IntegerField()
    date = peewee.DateField(index=True)
    title = peewee.CharField(max_length=255)
    highlights = JSONField(default=list)
    categories = JSONField(default=dict)

    class Meta:
        indexes = ((("major", "minor", "patch"), False),)
