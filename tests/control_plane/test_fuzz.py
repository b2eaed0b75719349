"""Schema-driven fuzzing of the public API (schemathesis): whatever it sends,
no 500, and every response matches what the OpenAPI document declares."""

import collections
import itertools

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from control_plane.app import create_app
from control_plane.infra import migrate


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory):
    app = create_app({"DATA_DIR": str(tmp_path_factory.mktemp("fuzz")), "SECRET_KEY": "fuzz"})
    migrate.upgrade(app.extensions["berth"].db)
    from control_plane.services.accounts import keys, orgs
    from control_plane.services.support import releases, tickets
    from tests.conftest import World

    world = World(app)
    org = orgs.create_org("fuzz")
    project = world.project(org, world.server(org))
    world.environment(project, "stopped")
    t = tickets.create_ticket(org_id=org.id, subject="s", description="d")
    tickets.add_comment(t.id, author="a", content="c", from_support=True)
    releases.add_release(version="1.2.3", date="2026-01-02", title="t", highlights=["h"],
                         categories={"added": ["x"]})
    # Enough keys that the fuzzer stays under the per-key limits (20 a minute for a
    # full-access key): it sends some ten thousand requests a minute, each key used once
    # in a thousand.
    raw_keys = [keys.create_key(org.id, f"f{i}", "full_access", "organization",
                                support_tickets=True, server_registration=True)[1]
                for i in range(1000)]
    app.fuzz_keys = itertools.cycle(raw_keys)
    return app


@pytest.fixture(scope="module")
def api_schema(fuzz_app):
    return schemathesis.openapi.from_wsgi("/api/public/v1/openapi.json", fuzz_app)


_case_ids = itertools.count()


def _fuzz(operation, keys):
    """Run one operation's generated cases; returns the status classes seen."""
    seen = collections.Counter()

    @given(case=operation.as_strategy())
    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        headers = {"Authorization": f"Bearer {next(keys)}"}
        if "X-Idempotency-Key" in (case.headers or {}):
            # Unique per case: a value generated twice for the same key would
            # replay another operation's response (rule 5), as designed.
            headers["X-Idempotency-Key"] = f"fuzz-{next(_case_ids)}"
        response = case.call_and_validate(
            headers=headers,
            # An opaque signed cursor is a string to the schema, yet only the
            # server's own cursors are valid (400 invalid_cursor by design).
            excluded_checks=[positive_data_acceptance])
        seen[response.status_code // 100] += 1

    check()
    return seen


@pytest.mark.slow  # generated requests by the hundred
def test_public_api_conforms(api_schema, fuzz_app):
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 9
    for operation in operations:
        seen = _fuzz(operation, fuzz_app.fuzz_keys)
        # The fuzzer must reach the views, not bounce off auth or routing.
        if operation.method == "get" and "{" not in operation.path:
            assert seen[2] > 0, (operation.path, seen)


@pytest.fixture(scope="module")
def ops_schema(fuzz_app):
    from control_plane.models import Organization
    from control_plane.models.org import PERMISSIONS
    from control_plane.services.accounts import orgs

    org = Organization.get(Organization.name == "fuzz")
    user = orgs.create_user(org.id, "fuzzer", "f@example.com", PERMISSIONS)
    fuzz_app.fuzz_tokens = itertools.cycle([orgs.issue_user_token(user.id) for _ in range(5)])
    return schemathesis.openapi.from_wsgi("/api/v1/openapi.json", fuzz_app)


@pytest.mark.slow
def test_operations_api_conforms(ops_schema, fuzz_app):
    """The same guarantees on /api/v1 (user tokens; git webhooks sign instead)."""
    operations = [result.ok() for result in ops_schema.get_all_operations()]
    assert len(operations) >= 9
    for operation in operations:
        seen = _fuzz(operation, fuzz_app.fuzz_tokens)
        if operation.method == "get" and "{" not in operation.path:
            assert seen[2] > 0, (operation.path, seen)
