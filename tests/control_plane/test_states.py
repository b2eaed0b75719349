"""The declared transition tables."""

import pytest

from control_plane import states
from control_plane.errors import ApiError


@pytest.mark.parametrize("resource, current, target", [
    ("environment", None, "deploying"), ("environment", "deploying", "running"),
    ("environment", "running", "stopped"), ("environment", "stopped", "running"),
    ("environment", "deploying", "error"), ("environment", "stopped", "destroying"),
    ("deployment", None, "pending"), ("deployment", "pending", "running"),
    ("deployment", "running", "success"), ("deployment", "running", "cancelled"),
])
def test_allowed(resource, current, target):
    assert states.check(resource, current, target) == target


@pytest.mark.parametrize("resource, current, target", [
    ("environment", "pending", "stopped"), ("environment", "deleted", "running"),
    ("environment", None, "running"), ("deployment", "success", "running"),
    ("deployment", "failed", "success"), ("deployment", "cancelled", "pending"),
])
def test_refused_with_a_code(resource, current, target):
    with pytest.raises(ApiError) as exc:
        states.check(resource, current, target)
    assert exc.value.status == 409 and exc.value.code == "invalid_transition"
    assert not states.can(resource, current, target)
