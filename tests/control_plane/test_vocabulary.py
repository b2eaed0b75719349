"""One vocabulary: every error code is defined once, in control_plane/vocabulary/errors.py,
and every status once, in control_plane/vocabulary/states.py. The rest of the code names
them (`errors.TokenInvalid`, `states.CommandStatus.ACKED`) instead of spelling
the strings again."""

import ast
import importlib
import pkgutil
from enum import StrEnum
from pathlib import Path

import pytest

import agent
from control_plane.vocabulary import errors, states
from protocol.errors import AgentErrorCode
from protocol.kinds import CommandKind, TaskKind
from protocol.states import CertificateState

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


def _mentions(word, node):
    return word in ast.unparse(node).lower()


def _used_as(tree, word, values):
    """String constants of `values` used as a `word` (status, kind, state): compared
    with, assigned to or passed as something so named. (A word like "success"
    elsewhere is not a status.)"""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_mentions(word, side) for side in sides):
                for side in sides:
                    yield from (n for n in _elements(side) if _text(n) in values)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("in_", "not_in") and _mentions(word, node.func.value)):
            for arg in node.args:
                yield from (n for n in _elements(arg) if _text(n) in values)
        elif isinstance(node, ast.Call) and _mentions(word, node.func):
            yield from (n for arg in node.args for n in _elements(arg) if _text(n) in values)
        elif isinstance(node, ast.keyword) and node.arg and word in node.arg:
            yield from (n for n in _elements(node.value) if _text(n) in values)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is not None and word in (_text(key) or ""):
                    yield from (n for n in _elements(value) if _text(n) in values)
        elif isinstance(node, ast.Assign) and any(_mentions(word, t) for t in node.targets):
            yield from (v for v in _elements(node.value) if _text(v) in values)


def _status_literals(tree):
    return _used_as(tree, "status", STATUSES)


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


AUTOMATION = {v.value for enum in (states.AutomationTrigger, states.AutomationAction)
              for v in enum}


def test_automation_triggers_and_actions_are_spelled_only_in_states_py():
    spelled = [f"{name}:{node.lineno} {node.value}" for name, tree in _modules()
               if name.startswith("services/automation/")
               for word in ("trigger_type", "type", "kind", "does")
               for node in _used_as(tree, word, AUTOMATION)]
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


# --- the protocol's vocabulary: kinds and states named once, for both sides ---------

KINDS = {k.value for k in TaskKind} | {k.value for k in CommandKind}
CERTIFICATE_STATES = {c.value for c in CertificateState}
AGENT_CODES = {c.value for c in AgentErrorCode}


def _trees(package_root):
    for path in sorted(package_root.rglob("*.py")):
        name = path.relative_to(package_root.parent).as_posix()
        if "migrations/" not in name:
            yield name, ast.parse(path.read_text())


def _both_sides():
    yield from _trees(ROOT)
    yield from _trees(Path(agent.__file__).parent)


def _handled(tree):
    """Kinds given to a registry: `@handles("deploy")`, `enqueue(server, "routes")`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in (
                "handles", "enqueue", "start", "register"):
            yield from (n for arg in node.args for n in _elements(arg) if _text(n) in KINDS)


def test_task_and_command_kinds_are_spelled_only_in_the_protocol():
    spelled = [f"{name}:{node.lineno} {node.value}" for name, tree in _both_sides()
               for node in [*_used_as(tree, "kind", KINDS), *_handled(tree)]]
    assert spelled == []


def test_certificate_states_are_spelled_only_in_the_protocol():
    spelled = [f"{name}:{node.lineno} {node.value}" for name, tree in _both_sides()
               for node in _used_as(tree, "state", CERTIFICATE_STATES)]
    assert spelled == []


def test_the_agents_reply_codes_are_spelled_only_in_the_protocol():
    spelled = [f"{name}:{node.lineno} {node.value}"
               for name, tree in _trees(Path(agent.__file__).parent)
               for node in ast.walk(tree) if _text(node) in AGENT_CODES]
    assert spelled == []


def _agent_error_classes():
    """AgentError and every subclass, with each of the agent's modules imported."""
    for module in pkgutil.walk_packages(agent.__path__, "agent."):
        importlib.import_module(module.name)
    from agent.errors import AgentError
    return [AgentError, *_subclasses(AgentError)]


def test_every_agent_error_carries_a_code_of_the_protocol():
    classes = _agent_error_classes()
    assert len(classes) > 20  # the domains' own errors were found too
    loose = {f"{cls.__module__}.{cls.__qualname__}": cls.code for cls in classes
             if not isinstance(cls.code, AgentErrorCode)}
    assert loose == {}


def test_the_agents_codes_keep_their_wire_values():
    """Agents and control planes of other releases, and the API's readers, know them."""
    assert sorted(AgentErrorCode) == sorted([
        "engine_unreachable", "engine_timeout", "engine_error", "container_not_found",
        "image_not_found", "agent_error", "unavailable", "no_mail_catcher",
        "import_refused", "import_corrupt", "import_unsafe_member", "import_too_large",
        "import_zip_bomb", "import_unrecognised", "import_bad_manifest",
        "import_version_mismatch", "import_missing_dump", "import_not_a_dump",
        "deploy_failed", "pre_backup_failed", "requirements_failed", "module_update_failed",
        "backup_failed", "restore_failed", "export_failed", "drill_failed", "archive_failed",
        "transfer_failed", "download_failed", "exec_failed", "proxy_failed"])


@pytest.mark.parametrize("source, found", [
    ('if d.kind == "export": pass', ["export"]),
    ('Deployment.select().where(Deployment.kind.in_(("deploy", "redeploy")))',
     ["deploy", "redeploy"]),
    ('actions.act(env, kind="redeploy")', ["redeploy"]),
    ('@handles("routes")\ndef routes(): pass', ["routes"]),
    ('queue.enqueue(server_id, "routes", {})', ["routes"]),
    ('{"state": "valid", "reason": None}', ["valid"]),
    ('log("info", "deploy started")', []),
])
def test_the_kind_and_state_checks_see_them(source, found):
    tree = ast.parse(source)
    seen = [*_used_as(tree, "kind", KINDS), *_handled(tree),
            *_used_as(tree, "state", CERTIFICATE_STATES)]
    assert [n.value for n in seen] == found
