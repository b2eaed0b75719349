"""Schema fields shared by the API modules."""

import datetime as dt
import operator

import marshmallow as ma
import orjson

from control_plane.infra.compiled import Rendered, Shown
from control_plane.inputs import git_rules, url_forms
from control_plane.vocabulary import states


class Schema(ma.Schema):
    """Output schemas read dict rows (list pages) and model objects alike.

    `_serialize` is marshmallow's own loop (Schema._serialize with Field.serialize
    inlined): a list page dumps ~10 fields x 20 rows per request, and the generic
    accessor and call layers were a fifth of its time. Same results: a missing
    value takes the field's dump_default, else the field is left out."""

    def get_attribute(self, obj, attr, default):
        if type(obj) is dict:
            return obj.get(attr, default)
        return super().get_attribute(obj, attr, default)

    def _serialize(self, obj, *, many=False):
        if type(obj) is Rendered:  # shown by this schema already (`shown`)
            return obj
        plan = self.__dict__.get("_dump_plan")
        if plan is None:
            fields = [
                (f.data_key if f.data_key is not None else name,
                 f.attribute if f.attribute is not None else name, f, f._CHECK_ATTRIBUTE,
                 _unchanged_types(f))
                for name, f in self.dump_fields.items()]
            attrs = [attr for _, attr, _, _, _ in fields]
            # Dict rows holding every attribute (list pages) are read in one C call.
            getter = (operator.itemgetter(*attrs) if len(attrs) > 1
                      else (lambda o: (o[attrs[0]],)) if attrs else (lambda o: ()))
            keys = tuple(key for key, *_ in fields)
            plan = self._dump_plan = (fields, getter, keys,
                                      all(check for *_, check, _ in fields),
                                      keys if keys == tuple(attrs) else None)
        if many and obj is not None:
            items = obj if type(obj) is list else list(obj)
            if plan[3] and items and all(type(item) is dict for item in items):
                try:
                    return self._dump_columns(items, plan)
                except KeyError:
                    pass  # a row lacks an attribute: row by row, with dump_default
            return [self._dump_one(item, plan) for item in items]
        return self._dump_one(obj, plan)

    def _dump_columns(self, items, plan):
        """Dict rows holding every attribute, column by column: a column whose values
        are all of types its field returns unchanged (most of them) costs one type
        scan, not a test per value; only the other columns are converted, with the
        very calls and results of _dump_one. A row whose keys are the output's, in
        its order (a list query selecting the schema's columns), is copied whole."""
        fields, getter, keys, _, same_keys = plan
        if same_keys is not None and all(tuple(item) == same_keys for item in items):
            out = [item.copy() for item in items]
        else:
            out = [dict(zip(keys, getter(item), strict=True)) for item in items]
        for key, attr, field, _, unchanged in fields:
            column = list(map(operator.itemgetter(key), out))
            if not set(map(type, column)).issubset(unchanged):
                for row, value, item in zip(out, column, items, strict=True):
                    if type(value) not in unchanged:
                        row[key] = field._serialize(value, attr, item)
        return out

    def _dump_one(self, obj, plan):
        fields, getter, keys, all_read, _ = plan
        if all_read and type(obj) is dict:
            try:
                out = dict(zip(keys, getter(obj), strict=True))
            except KeyError:
                pass  # a missing attribute: the loop below applies dump_default
            else:
                for key, attr, field, _, unchanged in fields:
                    value = out[key]
                    if type(value) not in unchanged:
                        out[key] = field._serialize(value, attr, obj)
                return out
        get = obj.get if type(obj) is dict else (lambda a, d: self.get_attribute(obj, a, d))
        out = self.dict_class()
        for key, attr, field, check, unchanged in fields:
            value = None
            if check:
                value = get(attr, ma.missing)
                if value is ma.missing:
                    default = field.dump_default
                    value = default() if callable(default) else default
                    if value is ma.missing:
                        continue
            out[key] = (value if type(value) in unchanged
                        else field._serialize(value, attr, obj))
        return out


def shown(schema):
    """A list's rows as `schema` shows them, each distinct row rendered once
    (compiled.Shown): for a list whose page passes it on (CursorList.page)."""
    one = schema()
    return Shown(lambda row: orjson.dumps(one.dump(row)))


def _unchanged_types(field):
    """The value types `field._serialize` returns as they are: no call for them.
    Ids of list rows arrive as text already (compiled.Compiled, text_ids)."""
    impl = type(field)._serialize
    if impl in (ma.fields.String._serialize, ma.fields.UUID._serialize):
        return (str, type(None))
    if impl is ma.fields.Number._serialize and field.num_type is int and not field.as_string:
        return (int, type(None))
    if impl is ma.fields.Field._serialize:  # Boolean, Raw: no conversion at all
        return (bool, int, str, type(None))
    if impl is UTCDateTime._serialize:
        return (type(None),)
    return ()


class UTCDateTime(ma.fields.DateTime):
    """Naive-UTC datetimes from the database, written as ISO 8601 with 'Z'."""

    # Timestamps already written, by value: a list shows the same rows on every read
    # and the formatting was a third of its dump. Bounded; emptied when full.
    _texts = {}
    _TEXTS_MAX = 16384

    def _serialize(self, value, attr, obj, **kwargs):
        if value is None:
            return None
        text = self._texts.get(value)
        if text is None:
            utc = value if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)
            text = utc.isoformat(timespec="milliseconds") + "Z"
            if len(self._texts) >= self._TEXTS_MAX:
                self._texts.clear()
            self._texts[value] = text
        return text


class UTCInstant(ma.fields.AwareDateTime):
    """A time a client sends (ISO 8601; UTC when it has no offset), read as naive UTC,
    as the database keeps times."""

    def __init__(self, **kwargs):
        super().__init__(default_timezone=dt.UTC, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        moment = super()._deserialize(value, attr, data, **kwargs)
        return moment.astimezone(dt.UTC).replace(tzinfo=None)


def _not_blank(value):
    if not value.strip():
        raise ma.ValidationError("Must not be blank.")


# What every text input may hold (control_plane/inputs/safe_input.py refuses the rest
# with a 400): no NUL, said by this pattern in the OpenAPI documents. Nor an
# unpaired UTF-16 surrogate; no pattern can say that: such a string is not a
# sequence of Unicode scalar values, which JSON Schema validators (jsonschema-rs,
# ECMAScript's u flag) take strings to be, and a range of surrogates does not
# compile there. The documents say it in words (the 400 response, the description).
TEXT_CHAR = r"[^\x00]"
TEXT_PATTERN = rf"^{TEXT_CHAR}*$"
# At least one character str.strip() keeps, the whitespace spelled out as in git_rules.
NOT_BLANK_PATTERN = (rf"^{TEXT_CHAR}*[^\x00\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a"
                     rf"\u2028\u2029\u202f\u205f\u3000]{TEXT_CHAR}*$")


def Name(**kwargs):  # noqa: N802 - a field factory reads like a field class
    kwargs["metadata"] = {"pattern": NOT_BLANK_PATTERN, **kwargs.get("metadata", {})}
    return ma.fields.String(validate=[ma.validate.Length(1, 255), _not_blank], **kwargs)


def _rule(problem, **kwargs):
    """A marshmallow validator from one of git_rules' checks (None: valid)."""
    def check(value):
        message = problem(value, **kwargs)
        if message is not None:
            raise ma.ValidationError(message)
    return check


BRANCH_RULES = ("A Git branch name, as `git check-ref-format --branch` takes it: no spaces, "
                "control characters or `~^:?*[\\`, no `..`, `@{`, `//`, no leading `-`, "
                "`.` or `/`, no part starting with `.` or ending with `.lock`, not `HEAD` "
                "or `@`, not ending with `.` or `/`.")


def Branch(**kwargs):  # noqa: N802
    # Git's own rules (`git check-ref-format --branch`), within the spec's 255.
    metadata = dict(kwargs.get("metadata", {}))
    metadata["description"] = " ".join(filter(None, (metadata.get("description"), BRANCH_RULES)))
    kwargs["metadata"] = {"pattern": git_rules.BRANCH_PATTERN, **metadata}
    return ma.fields.String(validate=[ma.validate.Length(1, git_rules.MAX_BRANCH),
                                      _rule(git_rules.branch_problem)], **kwargs)


def HttpsUrl(max_length=2048, **kwargs):  # noqa: N802
    return ma.fields.Url(schemes={"https"}, require_tld=False,
                         validate=ma.validate.Length(max=max_length), **kwargs)


def RepoUrl(**kwargs):  # noqa: N802
    """A project's repository: an https URL with a path, no credentials (git_rules)."""
    # The documented pattern is checked too (url_forms), so the two agree.
    kwargs["metadata"] = {"pattern": url_forms.REPO_URL_PATTERN, **kwargs.get("metadata", {})}
    return ma.fields.String(validate=[
        ma.validate.Length(max=git_rules.MAX_URL), _rule(git_rules.url_problem, ssh=False),
        ma.validate.Regexp(url_forms.REPO_URL_PATTERN,
                           error="Not an https URL of the documented form."),
    ], **kwargs)


class RedactedUrl(ma.fields.String):
    """A stored repository URL shown without credentials (rows from before they
    were refused may hold some)."""

    def _serialize(self, value, attr, obj, **kwargs):
        return git_rules.redact_url(value)


class Boolean(ma.fields.Boolean):
    """A JSON true or false, nothing else: marshmallow's own also takes "yes", 1,
    "on" and more, which a client could send by mistake and see stored as true."""

    def _deserialize(self, value, attr, data, **kwargs):
        if value is True or value is False:
            return value
        raise self.make_error("invalid", input=value)


class QueryBoolean(ma.fields.Boolean):
    """A query-string flag: exactly `true` or `false` (lower case)."""

    truthy = frozenset({"true"})
    falsy = frozenset({"false"})


class EnvironmentStatus(ma.fields.String):
    """An environment's stored status as the spec names it, on every surface that
    shows one (a destroyed environment reads `pending`: states.public_environment_status)."""

    def _serialize(self, value, attr, obj, **kwargs):
        return super()._serialize(value and states.public_environment_status(value), attr, obj,
                                  **kwargs)


def Neutralized():  # noqa: N802
    """An environment's `neutralized`: read-only, true, false or null."""
    return ma.fields.Boolean(required=True, allow_none=True, metadata={"description": (
        "Whether the environment's database is neutralised (Odoo's `database.is_neutralized`: "
        "mail servers and scheduled actions off, payments in test mode), as its server's "
        "agent read it after the last restore; null until a restore, or when it could not "
        "be read")})


def Anonymized():  # noqa: N802
    """An environment's `anonymized`: read-only, true, false or null."""
    return ma.fields.Boolean(required=True, allow_none=True, metadata={"description": (
        "Whether the last restore rewrote the copy's personal data (its copy policy's or "
        "the request's `anonymize`), as its server's agent reported it; null until a "
        "restore, or when the agent could not say")})
