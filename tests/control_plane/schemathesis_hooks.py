"""Loaded by `st run` (SCHEMATHESIS_HOOKS): a fresh credential on every request
(idempotent POSTs share a few, for replays), generated bodies that follow the
documents' `propertyNames`, and two checks of our own.

The per-key rate limits are fixed by the spec (120 / 20 requests a minute), so a
fuzzer on one key would mostly test the 429 path. The keys come from files named
in the environment, never from argv: GETs rotate over read-only keys, other
methods over full-access ones (or user tokens on /api/v1, one file for both)."""

import itertools
import os
import re
import threading
import uuid

import schemathesis


def _cycle(variable):
    with open(os.environ[variable]) as fh:
        return itertools.cycle(fh.read().split())


_lock = threading.Lock()
_reads = _cycle("BERTH_FUZZ_READ_KEYS")
_writes = _cycle("BERTH_FUZZ_WRITE_KEYS")


@schemathesis.auth(refresh_interval=None)
class RotatingBearer:
    def get(self, case, ctx):
        with _lock:
            return next(_reads if case.method.upper() == "GET" else _writes)

    def set(self, case, data, ctx):
        case.headers = case.headers or {}
        case.headers["Authorization"] = f"Bearer {data}"


# Idempotent POSTs share a few API keys and key values, so that a value is seen
# again by the same operation (rule 3) and by another one (rule 5): each replay
# must match what the replaying operation documents.
with open(os.environ["BERTH_FUZZ_WRITE_KEYS"]) as fh:
    _REPLAY_KEYS = fh.read().split()[:4]
# A refusal is replayed too, and these may refuse a valid request (a policy 422,
# a stateful 400: test_schemathesis.POLICY_422, STATEFUL_400), which another
# operation may not answer to a valid request of its own: their values are
# shared only with themselves. The others' refusals (404, 409) any may answer.
_OWN_REPLAYS = re.compile(r"^/api/public/v1/(projects|webhooks|notification-channels"
                          r"|projects/\{project_id\}/automation-rules)$")


def _positive(case):
    return case.meta is not None and case.meta.generation.mode.is_positive


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    """A replay answers before the body is read (docs/decisions.md, Idempotency), so
    a request the fuzzer made invalid on purpose gets a key of its own: what is
    checked then is that the server refuses it."""
    headers = case.headers or {}
    key = headers.get("X-Idempotency-Key")
    if case.method.upper() != "POST" or not isinstance(key, str) \
            or not 1 <= len(key.strip()) <= 255:
        return
    if _positive(case):
        slot = sum(key.encode("utf-8", "surrogatepass")) % len(_REPLAY_KEYS)
        path = case.operation.path
        headers["X-Idempotency-Key"] = f"replay-{slot}" + (
            f"-{path}" if _OWN_REPLAYS.match(path) else "")
        headers["Authorization"] = f"Bearer {_REPLAY_KEYS[slot]}"
    else:
        headers["X-Idempotency-Key"] = f"once-{uuid.uuid4()}"
    case.headers = headers


def _resolve(schema, root):
    while isinstance(schema, dict) and "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema if isinstance(schema, dict) else {}


def _named_as_declared(value, schema, root, depth=0):
    """`value` with each map key its schema's `propertyNames` refuses renamed to
    one it accepts (NAME_0, NAME_1...; dropped when none does)."""
    schema = _resolve(schema, root)
    if depth > 32:
        return value
    if isinstance(value, list):
        items = schema.get("items") or {}
        for branch in schema.get("anyOf", ()):
            items = _resolve(branch, root).get("items") or items
        return [_named_as_declared(item, items, root, depth + 1) for item in value]
    if not isinstance(value, dict):
        return value
    for branch in [*schema.get("anyOf", ()), *schema.get("allOf", ())]:
        value = _named_as_declared(value, branch, root, depth + 1)
    pattern = (schema.get("propertyNames") or {}).get("pattern")
    if pattern:
        names = (f"NAME_{i}" for i in range(len(value) + 1000))
        fixed = {}
        for key, item in value.items():
            if re.search(pattern, key) is None:
                key = next((n for n in names if re.search(pattern, n) and n not in value), None)
            if key is not None:
                fixed[key] = item
        value = fixed
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for branch in schema.get("anyOf", ()):  # the object branch of a JSON value
        if _resolve(branch, root).get("type") == "object":
            extra = _resolve(branch, root).get("additionalProperties", extra)
    return {key: _named_as_declared(item, properties.get(key, extra if isinstance(extra, dict)
                                                        else {}), root, depth + 1)
            for key, item in value.items()}


@schemathesis.hook
def map_body(ctx, body):
    """The documents are OpenAPI 3.0, which schemathesis reads as JSON Schema draft 4:
    it does not know `propertyNames` (draft 6), which the documents use for the
    names of a map's keys (a configuration's variables). Generated bodies are made
    to follow it, as a generator of a later draft would; a map whose key rule is
    not declared is left as drawn, so a rule missing from the document still shows."""
    operation = ctx.operation
    if operation is None:
        return body
    content = (operation.definition.raw.get("requestBody") or {}).get("content") or {}
    schema = (content.get("application/json") or {}).get("schema")
    if schema is None:
        return body
    return _named_as_declared(body, schema, operation.schema.raw_schema)


@schemathesis.check
def status_declared_by_the_operation(ctx, response, case):
    """Every status answered is one the operation lists itself: a `default`
    response would let any status through `status_code_conformance` unseen."""
    if case.method.upper() != case.operation.method.upper():
        return  # a method the path does not have (`unsupported_method` checks its 405)
    declared = {str(code) for code in case.operation.definition.raw.get("responses", {})}
    status = str(response.status_code)
    if status not in declared and f"{status[0]}XX" not in declared:
        raise AssertionError(f"{case.method} {case.operation.path} answered {status}, which "
                             f"it does not declare (declared: {', '.join(sorted(declared))})")


# A configuration the document allows may still be refused for what no schema
# states (test_schemathesis.POLICY_422): a reserved or credential-like variable
# name, a `dbfilter` that is no regular expression, a hard memory limit below the
# soft one, a PostgreSQL size out of its range (its pattern says the form, its
# description the range), more variables than 100 with those already stored. A 422 for anything
# else (a variable name of the wrong shape...) means the document allowed what the
# server refuses.
POLICY_PROBLEMS = ("is reserved", "looks like it holds a credential", "regular expression",
                   "Not below limit_memory_soft",
                   "A size such as",  # PostgreSQL sizes: a range across units (in words)
                   "At most 100 variables")  # with those stored before: state, not schema


@schemathesis.check
def policy_refusals_are_policy(ctx, response, case):
    if response.status_code != 422 or not _positive(case):
        return
    body = response.json()
    if case.operation.path.startswith("/api/public/v1/webhooks"):
        # A URL the pattern allows may still be one a webhook may not reach; any
        # other field's 422 means the document allowed what the server refuses.
        if body.get("error") != "invalid_webhook_url":
            raise AssertionError(f"valid webhook refused: {body}")
        return
    if case.operation.path.startswith("/api/public/v1/notification-channels"):
        # Which settings each type takes is said in words (one object for all
        # types), and e-mail needs an SMTP server: a 422 may only name them.
        named = set((body.get("details") or {}).get("json") or {})
        if isinstance(case.body, dict) and named and not named & {
                "type", "settings", "events", "description", "project_id", "is_active"}:
            return  # a field the document does not have (a stateful link's): not valid
        if body.get("error") != "validation_error" or not named <= {"settings", "type"}:
            raise AssertionError(f"valid notification channel refused: {body}")
        return
    if case.operation.path == "/api/public/v1/servers":
        # Which strings are host names, which are public keys.
        if body.get("error") != "invalid_ssh_server":
            raise AssertionError(f"valid SSH server refused: {body}")
        return
    if "/automation-rules" in case.operation.path:
        # Which environments are the project's, which crons fire, which zones exist.
        if body.get("error") != "invalid_automation_rule":
            raise AssertionError(f"valid automation rule refused: {body}")
        return
    if case.operation.path.endswith("/shell-sessions"):
        # A command or `odoo shell`, not both (said in words).
        if set(body.get("details") or {}) != {"command"}:
            raise AssertionError(f"valid shell session refused: {body}")
        return
    if case.operation.path.endswith("/environments"):
        # The capacity of the server the project is on.
        if body.get("error") != "exceeds_server_capacity":
            raise AssertionError(f"valid environment refused: {body}")
        return
    if not case.operation.path.endswith("/config"):
        return
    problems = [why for whys in (body.get("details") or {}).values() for why in whys]
    if body.get("error") != "invalid_configuration" or not problems or not all(
            any(mark in why for mark in POLICY_PROBLEMS) for why in problems):
        raise AssertionError(f"valid configuration refused: {body}")
