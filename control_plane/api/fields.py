"""Schema fields shared by the API modules."""

import datetime as dt

import marshmallow as ma


class Schema(ma.Schema):
    """Output schemas read dict rows (list pages) and model objects alike; a
    direct lookup spares marshmallow's generic accessor chain on every field."""

    def get_attribute(self, obj, attr, default):
        if type(obj) is dict:
            return obj.get(attr, default)
        return super().get_attribute(obj, attr, default)


class UTCDateTime(ma.fields.DateTime):
    """Naive-UTC datetimes from the database, written as ISO 8601 with 'Z'."""

    def _serialize(self, value, attr, obj, **kwargs):
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(timespec="milliseconds") + "Z"


def _not_blank(value):
    if not value.strip():
        raise ma.ValidationError("Must not be blank.")


def Name(**kwargs):  # noqa: N802 - a field factory reads like a field class
    return ma.fields.String(validate=[ma.validate.Length(1, 255), _not_blank], **kwargs)


def Branch(**kwargs):  # noqa: N802
    # Git ref names: no spaces or control characters, within the spec's 255.
    return ma.fields.String(validate=[
        ma.validate.Length(1, 255),
        ma.validate.Regexp(r"^[^\s~^:?*\[\\\x00-\x1f\x7f]+$",
                           error="Not a valid Git branch name."),
    ], **kwargs)


def HttpsUrl(max_length=2048, **kwargs):  # noqa: N802
    return ma.fields.Url(schemes={"https"}, require_tld=False,
                         validate=ma.validate.Length(max=max_length), **kwargs)
