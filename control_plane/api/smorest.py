"""flask-smorest, bent to the spec: one error body shape, and every operation
documents the auth, rate-limit, idempotency and error responses that the hooks add."""

import copy
import threading

import flask_smorest
import marshmallow as ma
from apispec import BasePlugin
from flask_smorest import Api
from webargs.flaskparser import FlaskParser, is_json_request

from control_plane import docs_ui
from control_plane.api.fields import TEXT_PATTERN
from control_plane.api.idempotency import IDEMPOTENT_MARKER
from control_plane.inputs import safe_input
from control_plane.vocabulary.errors import HTTP_CODES


class ErrorSchema(ma.Schema):
    error = ma.fields.String(required=True, metadata={"description": "Machine-readable code"})
    message = ma.fields.String(required=True)
    details = ma.fields.Dict(metadata={"description": "Field errors (422 only)"})
    retry_after = ma.fields.Integer(metadata={"description": "Seconds (429 only)"})


def _flatten(messages, prefix=""):
    """{'json': {'name': ['Too long.']}} -> ['name: Too long.']"""
    out = []
    if isinstance(messages, dict):
        for key, value in messages.items():
            name = "" if key in ("json", "query", "headers", "path", "form") and not prefix else key
            out += _flatten(value, f"{prefix}.{name}".strip(".") if name else prefix)
    elif isinstance(messages, list):
        for m in messages:
            out += _flatten(m, prefix) if isinstance(m, dict | list) else [f"{prefix}: {m}" if prefix else str(m)]
    else:
        out.append(f"{prefix}: {messages}" if prefix else str(messages))
    return out


def invalid_message(details):
    """A 422's message: each refused field and why, in one line."""
    return "Invalid request: " + "; ".join(_flatten(details))


def http_error_body(error):
    """Body, status and headers for a werkzeug HTTPException (routing, parsing, webargs)."""
    status = error.code or 500
    data = getattr(error, "data", None) or {}
    body = {"error": HTTP_CODES.get(status, "error"), "message": error.description or error.name}
    details = data.get("errors") or data.get("messages")
    if status == 422 and details:
        body["message"] = invalid_message(details)
        body["details"] = details
    elif status == 400 and details:  # e.g. a body that is not valid JSON
        body["message"] = "; ".join(_flatten(details))
    elif status == 404:
        body["message"] = "Not found."
    elif status >= 500:
        body["message"] = "Internal error."
    headers = dict(data.get("headers") or {})
    if status == 405 and getattr(error, "valid_methods", None):
        headers["Allow"] = ", ".join(error.valid_methods)
    return body, status, headers


class Parser(FlaskParser):
    """webargs' parser, loading JSON bodies through safe_input: too deep, too long a
    number, or text no database stores is a 400 before any schema sees it."""

    def _raw_load_json(self, req):
        if not is_json_request(req):
            return ma.missing
        return safe_input.loads(req.get_data(cache=True))

    _EMPTY_QUERY = {}  # schema id -> its result for no query string at all

    def parse(self, argmap, req=None, *, location=None, **kwargs):
        """A list read with no query string (the usual case) takes the schema's
        defaults, the same each time: loaded once per schema, then copied. Only
        for schemas with no hooks and constant defaults."""
        if location != "query" or not isinstance(argmap, ma.Schema) or kwargs.get("validate"):
            return super().parse(argmap, req, location=location, **kwargs)
        if (req or self.get_default_request()).query_string:
            return super().parse(argmap, req, location=location, **kwargs)
        hit = self._EMPTY_QUERY.get(id(argmap))
        if hit is not None:
            return dict(hit[1])
        loaded = super().parse(argmap, req, location=location, **kwargs)
        if not any(argmap._hooks.values()) and not any(callable(f.load_default)
                                         for f in argmap.load_fields.values()):
            self._EMPTY_QUERY[id(argmap)] = (argmap, dict(loaded))  # keeps the id's schema alive
        return loaded


def _mark_input(field, seen):
    """Marks a request field, and the fields inside it, as text a client sends
    (`text_input_pattern` documents what such text may hold)."""
    if id(field) in seen:
        return
    seen.add(id(field))
    field.berth_input = True
    inner = [getattr(field, name, None) for name in ("inner", "key_field", "value_field")]
    if isinstance(field, ma.fields.Nested):
        nested = field.schema
        inner += [*nested.fields.values(), *type(nested)._declared_fields.values()]
    for child in inner:
        if child is not None:
            _mark_input(child, seen)


class Blueprint(flask_smorest.Blueprint):
    """flask-smorest's Blueprint, except that argument schemas given as classes are
    instantiated once here: webargs would build one per request (~4% of a list)."""

    ARGUMENTS_PARSER = Parser()

    def arguments(self, schema, *args, **kwargs):
        schema = schema() if isinstance(schema, type) else schema
        seen = set()  # the class's fields too: other instances are deep copies of them
        for field in [*schema.fields.values(), *type(schema)._declared_fields.values()]:
            _mark_input(field, seen)
        return super().arguments(schema, *args, **kwargs)


def null_only_alternative(converter, field, ret, **kwargs):
    """apispec writes a nullable nested object (OpenAPI 3.0) as `anyOf: [ref, {type:
    object, nullable: true}]`, whose second branch admits any object: the nested
    schema's required fields and closed properties then say nothing. Narrowed to null."""
    for branch in ret.get("anyOf", ()):
        if branch == {"type": "object", "nullable": True}:
            branch["enum"] = [None]
    return {}


def text_input_pattern(converter, field, ret, **kwargs):
    """Text a client sends holds no NUL and no unpaired surrogate (400 otherwise,
    control_plane/inputs/safe_input.py): said as a pattern on every request string that
    has no pattern, choice or format of its own (those say less already)."""
    if (getattr(field, "berth_input", False) and ret.get("type") == "string"
            and not {"pattern", "enum", "format"} & ret.keys()):
        return {"pattern": TEXT_PATTERN}
    return {}


def mapping_sizes(converter, field, ret, **kwargs):
    """A Dict's Length is its number of keys (apispec writes string lengths), and
    a `key_pattern` in its metadata the rule its keys follow."""
    if not isinstance(field, ma.fields.Dict):
        return {}
    out = {f"{end}Properties": ret.pop(f"{end}Length") for end in ("min", "max")
           if f"{end}Length" in ret}
    if field.metadata.get("key_pattern"):
        out["propertyNames"] = {"pattern": field.metadata["key_pattern"]}
    return out


class BerthApi(Api):
    ERROR_SCHEMA = ErrorSchema

    def __init__(self, *args, **kwargs):
        self._undocumented, self._documenting = [], threading.Lock()
        super().__init__(*args, **kwargs)
        for function in (null_only_alternative, text_input_pattern, mapping_sizes):
            self.ma_plugin.converter.add_attribute_function(function)

    # The OpenAPI document is written when first read (the docs, `berth openapi`), not
    # at start-up: documenting the views was two thirds of what creating an app cost,
    # and every process (a web worker, each admin command) creates one. Any read of
    # `spec` documents the blueprints registered before it, in order, so the document
    # is the one an eager registration writes.
    def register_blueprint(self, blp, *, parameters=None, **options):
        name = options.get("name", blp.name)
        self._app.extensions["flask-smorest"]["blp_name_to_api"][name] = self
        self._app.register_blueprint(blp, **options)
        self._undocumented.append((blp, name, parameters))

    @property
    def spec(self):
        if self._undocumented:
            with self._documenting:
                while self._undocumented:
                    blp, name, parameters = self._undocumented.pop(0)
                    blp.register_views_in_doc(self, self._app, self._spec, name=name,
                                              parameters=parameters)
                    self._spec.tag({"name": name, "description": blp.description})
        return self._spec

    @spec.setter
    def spec(self, value):  # flask-smorest's init_app
        self._spec = value

    def handle_http_exception(self, error):
        return http_error_body(error)

    # The docs pages: our templates (charset, no inline script) and headers.
    def _openapi_swagger_ui(self):
        return docs_ui.render("swagger_ui.html", self, swagger_ui_url=self._swagger_ui_url,
                              swagger_ui_config=self.config.get("OPENAPI_SWAGGER_UI_CONFIG", {}))

    def _openapi_redoc(self):
        return docs_ui.render("redoc.html", self, redoc_url=self._redoc_url)


RATE_LIMIT_HEADERS = {
    "X-RateLimit-Limit": {"description": "Requests allowed in the window", "schema": {"type": "integer"}},
    "X-RateLimit-Remaining": {"description": "Requests left in the window", "schema": {"type": "integer"}},
    "X-RateLimit-Window": {"description": "Window length in seconds (always 60)", "schema": {"type": "integer"}},
    "X-API-Key-Id": {"description": "Short id of the key used (`key_<id>`)", "schema": {"type": "string"}},
}

RETRY_AFTER_HEADER = {
    "Retry-After": {"description": "Seconds until a request is allowed again", "schema": {"type": "integer"}},
}

# The operations `@idempotent` marks (see control_plane/api/idempotency.py).
IDEMPOTENCY_KEY_PARAMETER = {
    "name": "X-Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Retry-safe POST: a repeat within 24 hours with the same key (per API key) "
                   "returns the first response, a refusal (400, 404, 409, 422) included, "
                   "and repeats nothing; a 401, 403, 429 or 5xx is not kept. UUID "
                   "recommended.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}
IDEMPOTENCY_REPLAYED_HEADER = {
    "X-Idempotency-Replayed": {
        "description": "`true` on a response replayed for a repeated `X-Idempotency-Key`",
        "schema": {"type": "string", "enum": ["true"]},
    },
}

def confirm_delete_header(what):
    """The X-Confirm-Delete header, as `@blp.doc(**...)` (the service checks it:
    absent or other than `true` is 400 `confirm_required`)."""
    return {"parameters": [{
        "in": "header", "name": "X-Confirm-Delete", "required": True,
        "description": f"Must be exactly `true` to {what}; otherwise 400 `confirm_required`.",
        "schema": {"type": "string", "enum": ["true"]}}]}


# Idempotency rule 5: a key first used on another operation replays that one's
# response (status and body); an idempotent operation can so answer any other's.
REPLAY_DESCRIPTION = ("Replayed (idempotency rule 5): the `X-Idempotency-Key` was first used on "
                      "another operation, whose response this is, with `X-Idempotency-Replayed: "
                      "true`.")
# The 201 of an operation that answers one only as a replay (the five actions):
# a marker StandardResponses replaces with the idempotent creates' bodies.
REPLAYED_CREATE = "x-replayed-create"
CREATED_REPLAY_SCHEMA = {REPLAYED_CREATE: True}


ERROR_RESPONSES = {
    "400": "Bad request (`bad_request`: a body that is not JSON, nests deeper than 64 levels "
           "or has a number longer than 100 characters; text with a NUL or an unpaired "
           "surrogate in the body, query, path or headers)",
    "401": "Missing, invalid, revoked (`invalid_api_key`, `missing_api_key`, `key_revoked`) or "
           "expired (`key_expired`) key; a revoked or expired key is still named "
           "(`X-API-Key-Id`), with its window (`X-RateLimit-*`)",
    "403": "The key may not do this (`write_access_required`, `org_scope_required`, `project_scoped_key`, capability codes)",
    "404": "Not found, or outside the key's organization or project (`not_found`)",
    "409": "Conflict (`key_has_no_owner`, `idempotency_key_in_use`, resource-specific codes)",
    "422": "Invalid fields (`validation_error`, with `details`)",
    "429": "Rate limit exceeded: the key's own (`rate_limit_exceeded`), a per-target one "
           "(`target_rate_limit`: metrics and runtime logs per server, environment and "
           "organization) or the webhook-mutation one (`webhook_rate_limit`); `Retry-After` "
           "header and `retry_after` field",
}


# Any JSON value whose text (keys too) the server takes: no NUL (TEXT_PATTERN), for
# the parts of a body that are free-form (a Git push's commits). Keys are named by
# `propertyNames`, JSON Schema's keyword, which OpenAPI 3.0 tools that do not know
# it ignore.
JSON_VALUE = {"nullable": True, "description": "Any JSON value without a NUL character",
              "anyOf": [
                  {"type": "string", "pattern": TEXT_PATTERN}, {"type": "number"},
                  {"type": "boolean"},
                  {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
                  {"type": "object", "propertyNames": {"pattern": TEXT_PATTERN},
                   "additionalProperties": {"$ref": "#/components/schemas/JsonValue"}}]}

INVALID_CURSOR = ("A `cursor` this list did not make, for these filters (`invalid_cursor`); or a "
                  "bad request (`bad_request`: text with a NUL or an unpaired surrogate)")


def _response(responses, status):
    """An operation's response by status (flask-smorest keys them by int, apispec by str)."""
    return next((r for k, r in responses.items() if str(k) == str(status)), None)


def _set_response(responses, status, response):
    for key in [k for k in responses if str(k) == str(status)]:
        del responses[key]
    responses[str(status)] = response


def _has_cursor(operation):
    return any(isinstance(p, dict) and p.get("in") == "query" and p.get("name") == "cursor"
               for p in operation.get("parameters", ()))


class SchemaRules(BasePlugin):
    """A body's rules across its fields (one of two fields, not both), said in its
    document as the schema's `Meta.openapi` (JSON Schema keywords): a client, and the
    fuzzer, then know which bodies the server takes."""

    def schema_helper(self, name, definition, **kwargs):
        schema = kwargs.get("schema")
        meta = getattr(schema if isinstance(schema, type) else type(schema), "Meta", None)
        return copy.deepcopy(getattr(meta, "openapi", None)) or None


class StandardResponses(BasePlugin):
    """Adds the responses every authenticated operation can give, and the
    rate-limit headers every such response carries, to the OpenAPI document."""

    def __init__(self, authenticated=True):
        self.authenticated = authenticated
        self._created = []  # (an idempotent operation's 201, its own body or None)

    def init_spec(self, spec):
        self.spec = spec
        spec.components.schema("BerthError", schema=ErrorSchema)
        for status, description in ERROR_RESPONSES.items():
            headers = dict(RATE_LIMIT_HEADERS)  # a 401: when the key is known
            if status == "429":
                headers.update(RETRY_AFTER_HEADER)
            spec.components.response(f"Error{status}", {
                "description": description,
                "content": {"application/json": {"schema": "BerthError"}},
                "headers": headers,
            })

    def operation_helper(self, path=None, operations=None, **kwargs):
        if not self.authenticated:
            return
        for operation in (operations or {}).values():
            # The marker `@idempotent` leaves; popped, it becomes the header docs.
            idempotent = operation.pop(IDEMPOTENT_MARKER, False)
            if idempotent:
                operation.setdefault("parameters", []).append(dict(IDEMPOTENCY_KEY_PARAMETER))
            responses = operation.setdefault("responses", {})
            for status, response in responses.items():
                if isinstance(response, dict) and str(status).startswith("2"):
                    headers = response.setdefault("headers", {})
                    headers.update(RATE_LIMIT_HEADERS)
                    if idempotent:
                        headers.update(IDEMPOTENCY_REPLAYED_HEADER)
            created = _response(responses, 201)
            if idempotent and created is not None:
                self._replayable(created)
            if _has_cursor(operation):
                _set_response(responses, 400, {
                    "description": INVALID_CURSOR,
                    "content": {"application/json": {"schema": "BerthError"}},
                    "headers": dict(RATE_LIMIT_HEADERS)})
            for status in ERROR_RESPONSES:
                if _response(responses, status) is None:
                    responses[status] = f"Error{status}"
            responses.pop("default", None)

    def _replayable(self, created):
        """Rule 5: an idempotent operation's 201 is its own body, or, replayed, any
        other idempotent create's. Each one documented rewrites all those seen, so
        once the document is written each lists them all, its own first."""
        content = created["content"]["application/json"]
        own = None if REPLAYED_CREATE in content["schema"] else content["schema"]
        if own is not None:
            created["description"] = (f"{created.get('description') or 'Created'}; or "
                                      f"r{REPLAY_DESCRIPTION[1:]}")
        self._created.append((content, own))
        bodies = [body for _, body in self._created if body is not None]
        for seen, its_own in self._created:
            seen["schema"] = {"anyOf": [*([its_own] if its_own else ()),
                                        *(body for body in bodies if body != its_own)]}


class DeclaredResponses(BasePlugin):
    """The operations surface: each operation lists the statuses it answers, and
    no `default` response stands in for the others (it would document any status).
    Every operation may answer 400 `bad_request` (a body that is not JSON, text
    with a NUL or an unpaired surrogate), a cursor list also `invalid_cursor`."""

    def init_spec(self, spec):
        self.spec = spec
        spec.components.schema("JsonValue", JSON_VALUE)

    def operation_helper(self, path=None, operations=None, **kwargs):
        for operation in (operations or {}).values():
            responses = operation.setdefault("responses", {})
            responses.pop("default", None)
            if _has_cursor(operation):
                _set_response(responses, 400, {
                    "description": INVALID_CURSOR,
                    "content": {"application/json": {"schema": "Error"}}})
            if _response(responses, 400) is None:
                responses["400"] = {"description": ERROR_RESPONSES["400"],
                                    "content": {"application/json": {"schema": "Error"}}}


def error_responses(blp, descriptions, always=(401, 404)):
    """A decorator factory for a blueprint's views: `@errors(409, 422)` documents
    those error responses (and `always`), all with the one error body."""
    def errors(*statuses):
        def decorate(view):
            for status in (*always, *statuses):
                view = blp.alt_response(status, schema=ErrorSchema,
                                        description=descriptions[status])(view)
            return view
        return decorate
    return errors
