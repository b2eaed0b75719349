"""The event names' one table: what webhooks may subscribe to, the aliases, titles."""

import pytest

from control_plane import events
from control_plane.events import Name


def test_subscribable_names_are_the_table_without_ping():
    assert events.SUBSCRIBABLE == tuple(n.value for n in Name)[:-1]
    assert Name.PING.value not in events.SUBSCRIBABLE
    assert len(set(events.SUBSCRIBABLE)) == len(events.SUBSCRIBABLE) == 30


def test_deployment_aliases_name_the_deploy_events():
    assert events.ALIASES == {f"deployment.{s}": f"deploy.{s}"
                              for s in ("started", "completed", "failed", "cancelled")}
    assert events.canonical("deployment.failed") == "deploy.failed"
    assert events.canonical("environment.created") == "environment.created"


def test_titles_and_unknown_names():
    assert events.title("deploy.completed") == "Deployment completed"
    assert events.title("ping") == "Test ping"
    assert events.title("something.else") == "something.else"


def test_an_unknown_name_is_never_recorded():
    with pytest.raises(ValueError):
        events.record_event(None, None, "deploy.finished", {})
