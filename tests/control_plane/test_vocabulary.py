"""One vocabulary: every error code is defined once, in control_plane/errors.py,
and every status once, in control_plane/states.py. The rest of the code names
them (`errors.TokenInvalid`, `states.CommandStatus.ACKED`) instead of spelling
the strings again."""

import ast
from enum import StrEnum
from pathlib import Path

import pytest

from control_plane import errors, states

ROOT = Path(states.__file__).parent

# Where the strings are defined, and migrations (frozen in time, by design).
HOMES = ("errors.py", "states.py", "migrations/")


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


CODES = {cls.code for cls in _subclasses(errors.ApiError)} | {errors.ApiError.code}
STATUSES = {member.value for enum in vars(states).values()
            if isinstance(enum, type) and issubclass(enum, StrEnum) and enum is not StrEnum
            for member in enum}


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if not name.startswith(HOMES):
            yield name, ast.parse(path.read_text())


def _text(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _elements(node):
    """The values an expression may be: a tuple's items, both arms of `a if c else b`."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e for item in node.elts for e in _elements(item)]
    if isinstance(node, ast.IfExp):
        return _elements(node.body) + _elements(node.orelse)
    return [node]


def _mentions_status(node):
    return "status" in ast.unparse(node).lower()


def _status_literals(tree):
    """String constants used as a status: compared with, assigned to or passed as
    something named status. (A word like "success" elsewhere is not a status.)"""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_mentions_status(side) for side in sides):
                for side in sides:
                    yield from (n for n in _elements(side) if _text(n) in STATUSES)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("in_", "not_in") and _mentions_status(node.func.value)):
            for arg in node.args:
                yield from (n for n in _elements(arg) if _text(n) in STATUSES)
        elif isinstance(node, ast.Call) and _mentions_status(node.func):
            yield from (n for arg in node.args for n in _elements(arg) if _text(n) in STATUSES)
        elif isinstance(node, ast.keyword) and node.arg and "status" in node.arg:
            yield from (n for n in _elements(node.value) if _text(n) in STATUSES)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is not None and "status" in (_text(key) or ""):
                    yield from (n for n in _elements(value) if _text(n) in STATUSES)
        elif isinstance(node, ast.Assign) and any(_mentions_status(t) for t in node.targets):
            yield from (v for v in _elements(node.value) if _text(v) in STATUSES)


def test_the_vocabulary_is_found():
    assert {"token_invalid", "deployment_in_progress", "invalid_transition"} <= CODES
    assert {"acked", "withdrawn", "consumed", "destroyed", "retrying"} <= STATUSES


def test_each_error_code_is_defined_once():
    owners = {}
    for cls in _subclasses(errors.ApiError):
        if "code" in vars(cls):
            owners.setdefault(cls.code, []).append(cls.__name__)
    assert {code: names for code, names in owners.items() if len(names) > 1} == {}


def test_error_codes_are_spelled_only_in_errors_py():
    spelled = [f"{name}:{node.lineno} {node.value}" for name, tree in _modules()
               for node in ast.walk(tree) if _text(node) in CODES]
    assert spelled == []


def test_statuses_are_spelled_only_in_states_py():
    spelled = [f"{name}:{node.lineno} {node.value}" for name, tree in _modules()
               for node in _status_literals(tree)]
    assert spelled == []


@pytest.mark.parametrize("source, found", [
    ('if d.status == "pending": pass', ["pending"]),
    ('Deployment.update(status="running")', ["running"]),
    ('q.where(Command.status.in_(("queued", "delivered")))', ["queued", "delivered"]),
    ('x = {"status": "failed"}', ["failed"]),
    ('BUSY_STATUSES = ("running", "deploying")', ["running", "deploying"]),
    ('D.update(status="succeeded" if ok else "failed")', ["succeeded", "failed"]),
    ('set_environment_status(env, "destroying", org_id)', ["destroying"]),
    ('return {"success": True}', []),
    ('if level == "error": pass', []),
])
def test_the_status_check_sees_a_status_in_each_place(source, found):
    assert [n.value for n in _status_literals(ast.parse(source))] == found
