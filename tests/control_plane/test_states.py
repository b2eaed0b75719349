"""The declared transition tables."""

import pytest

from control_plane.vocabulary import states
from control_plane.vocabulary.errors import ApiError


@pytest.mark.parametrize("resource, current, target", [
    ("deployment", None, "pending"), ("deployment", "pending", "running"),
    ("deployment", "running", "success"), ("deployment", "running", "cancelled"),
])
def test_allowed(resource, current, target):
    assert states.check(resource, current, target) == target


@pytest.mark.parametrize("resource, current, target", [
    ("deployment", "success", "running"),
    ("deployment", "failed", "success"), ("deployment", "cancelled", "pending"),
])
def test_refused_with_a_code(resource, current, target):
    with pytest.raises(ApiError) as exc:
        states.check(resource, current, target)
    assert exc.value.status == 409 and exc.value.code == "invalid_transition"
    assert not states.can(resource, current, target)


@pytest.mark.parametrize("resource, current, target", [
    ("command", None, "queued"), ("command", "queued", "delivered"),
    ("command", "delivered", "delivered"), ("command", "delivered", "acked"),
    ("command", "acked", "succeeded"), ("command", "acked", "failed"),
    ("command", "acked", "withdrawn"), ("command", "withdrawn", "failed"),
    ("registration_token", None, "pending"), ("registration_token", "pending", "consumed"),
    ("registration_token", "pending", "revoked"),
    ("delivery", "retrying", "delivered"),
    ("backup", None, "pending"), ("backup", "pending", "running"),
    ("backup", "running", "completed"), ("backup", "running", "failed"),
    ("backup", "pending", "cancelled"), ("backup", "running", "cancelled"),
])
def test_allowed_in_the_new_tables(resource, current, target):
    assert states.check(resource, current, target) == target


@pytest.mark.parametrize("resource, current, target", [
    ("command", "succeeded", "failed"), ("command", "withdrawn", "acked"),
    ("command", "acked", "delivered"), ("command", "succeeded", "withdrawn"),
    ("registration_token", "consumed", "revoked"), ("registration_token", "revoked", "consumed"),
    ("registration_token", "pending", "expired"),  # derived, never stored
    ("delivery", "delivered", "retrying"),
    ("backup", "completed", "failed"), ("backup", "failed", "completed"),
    ("backup", "cancelled", "running"), ("backup", "completed", "running"),
    ("backup", None, "running"), ("backup", "pending", "expired"),  # not a spec status
])
def test_refused_in_the_new_tables(resource, current, target):
    assert not states.can(resource, current, target)


def test_sources_give_the_where_clause_of_a_move():
    assert states.sources("command", "acked") == ("delivered", "queued")
    assert states.sources("command", "withdrawn") == ("acked", "delivered", "queued")
    assert set(states.sources("command", "succeeded")) == {"queued", "delivered", "acked",
                                                           "withdrawn"}
    assert states.sources("command", "delivered") == states.COMMAND_UNDELIVERED[::-1]
    assert states.sources("registration_token", "consumed") == ("pending",)
    assert states.sources("registration_token", "revoked") == ("pending",)


ENUMS = {"deployment": states.DeploymentStatus,
         "command": states.CommandStatus, "registration_token": states.TokenStatus,
         "webhook": states.WebhookState, "delivery": states.DeliveryStatus,
         "backup": states.BackupStatus, "domain": states.DomainStatus,
         "automation_run": states.RunStatus, "upgrade": states.UpgradeStatus}


@pytest.mark.parametrize("resource", sorted(states.TABLES))
def test_every_status_in_a_table_is_a_member_of_its_enum(resource):
    members = set(ENUMS[resource])
    for current, target in states.TABLES[resource]:
        assert current in members | {None, "*"} and target in members


def test_members_are_their_strings():
    assert states.EnvironmentStatus.RUNNING == "running"
    assert f"{states.CommandStatus.ACKED}" == "acked"
    assert {"pending": 1}[states.TokenStatus.PENDING] == 1
    assert states.TASK_STATUS["success"] == "completed"


def test_destroyed_reads_pending_where_the_spec_fixes_the_status():
    assert states.public_environment_status("destroyed") == "pending"
    assert states.public_environment_status("running") == "running"
    assert "destroyed" not in states.PUBLIC_ENVIRONMENT_STATUS.values()


def test_is_active_is_declared_by_the_status_and_the_project():
    assert states.is_active("running") and states.is_active("pending")
    assert not states.is_active("destroyed") and not states.is_active("deleted")
    assert not states.is_active("stopped", project_deleted=True)


def test_a_backup_status_is_every_spec_value_and_no_other():
    assert [s.value for s in states.BackupStatus] == [
        "pending", "running", "completed", "failed", "cancelled"]
    assert states.sources("backup", "completed") == ("pending", "running")
    assert set(states.BACKUP_TERMINAL) | set(states.BACKUP_IN_PROGRESS) == set(
        states.BackupStatus)


def test_the_filter_only_deployment_statuses_are_never_produced():
    """The spec's `queued`, `building`, `deploying` and `rolled_back`: no move of the
    deployment table reaches them (they stay list filters that find nothing)."""
    targets = {to for _, to in states.DEPLOYMENT}
    assert states.FILTER_ONLY and not (states.FILTER_ONLY & targets)
    assert set(states.DeploymentStatus) == targets | states.FILTER_ONLY
