"""Input is refused before it reaches a schema or a query when it could not be
parsed safely or stored at all: one guard for request bodies (the API's and the
signed Git push's), query strings, path values and headers, and the admin CLI.

- JSON: at most MAX_DEPTH levels of arrays and objects, numbers of at most
  MAX_NUMBER_LENGTH characters (Python's int() refuses 4,300 digits with a
  ValueError; deep nesting exhausts its recursion), no NaN or Infinity.
- Text, keys included: no NUL (PostgreSQL text cannot hold it, SQLite would,
  so the two databases would differ) and no unpaired surrogate (not UTF-8:
  neither database can encode it)."""

import json
import re

from control_plane.vocabulary.errors import BadRequest

MAX_DEPTH = 64
MAX_NUMBER_LENGTH = 100
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class UnsafeInput(BadRequest):
    """400 `bad_request`, like a body that is not JSON."""


def check_text(value, where):
    if _UNSTORABLE.search(value):
        raise UnsafeInput(f"{where}: text must not contain NUL characters or unpaired "
                          "surrogates.")


def _number(convert):
    def parse(literal):
        if len(literal) > MAX_NUMBER_LENGTH:
            raise UnsafeInput(f"A number in the body is longer than {MAX_NUMBER_LENGTH} "
                              "characters.")
        return convert(literal)
    return parse


def _constant(name):
    raise UnsafeInput(f"{name} is not a JSON number.")


_DECODER = json.JSONDecoder(parse_int=_number(int), parse_float=_number(float),
                            parse_constant=_constant)
_TOO_DEEP = f"The body nests arrays and objects deeper than {MAX_DEPTH} levels."


def loads(data):
    """The JSON value of a request body (bytes are UTF-8). Raises json.JSONDecodeError
    for a body that is not JSON (an empty one too, with `doc` ""), UnsafeInput for
    one that is but may not be used."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise json.JSONDecodeError(f"Not UTF-8: {exc.reason}",
                                       data.decode("utf-8", "replace"), exc.start) from None
    try:
        value = _DECODER.decode(data)
    except RecursionError:  # deeper than the interpreter's limit: far past ours
        raise UnsafeInput(_TOO_DEEP) from None
    _check_tree(value)
    return value


def _check_tree(value):
    """Depth and text of a parsed body, without recursion (a path only on failure)."""
    if type(value) is str:
        check_text(value, "the body")
    stack = [(value, 1, "")] if type(value) in (dict, list) else []
    while stack:
        node, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise UnsafeInput(_TOO_DEEP)
        if type(node) is dict:
            items = node.items()
            for key in node:
                check_text(key, f"{path or 'the body'} (a key)")
        else:
            items = enumerate(node)
        for key, item in items:
            if type(item) is str:
                if _UNSTORABLE.search(item):
                    check_text(item, _join(path, key))
            elif type(item) in (dict, list):
                stack.append((item, depth + 1, _join(path, key)))


def _join(path, key):
    return f"{path}[{key}]" if type(key) is int else f"{path}.{key}" if path else key


def storable(value):
    """What an agent reports is kept, not refused (a container's output may hold a
    NUL): text, and the text inside a parsed JSON result, with each character that
    no database can store replaced by U+FFFD."""
    if type(value) is str:
        return _UNSTORABLE.sub("\ufffd", value) if _UNSTORABLE.search(value) else value
    if type(value) is dict:
        return {storable(k): storable(v) for k, v in value.items()}
    if type(value) is list:
        return [storable(v) for v in value]
    return value


def check_request(request):
    """Query string, path values and headers of a Flask request, before any view
    or authentication reads them (keys are hashed, but an idempotency key or a Git
    delivery id is looked up as sent)."""
    # Nearly every request is clean: one search over all of its text, and the
    # item-by-item pass below (which names the culprit) only when it finds one.
    # Headers are read from the WSGI environ as EnvironHeaders reads them.
    environ = request.environ
    texts = [environ.get("CONTENT_TYPE", ""), environ.get("CONTENT_LENGTH", "")]
    for name, value in environ.items():
        if name.startswith("HTTP_"):
            texts += (name, value)
    if environ.get("QUERY_STRING"):  # parsing an empty one costs more than the test
        for name, value in request.args.items(multi=True):
            texts += (name, value)
    for value in (request.view_args or {}).values():
        if isinstance(value, str):
            texts.append(value)
    if not _UNSTORABLE.search("\n".join(texts)):
        return
    for name, value in request.args.items(multi=True):
        check_text(name, "a query parameter name")
        check_text(value, f"query parameter {name}")
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str):
            check_text(value, f"path value {name}")
    for name, value in request.headers.items():
        check_text(name, "a header name")
        check_text(value, f"header {name}")
