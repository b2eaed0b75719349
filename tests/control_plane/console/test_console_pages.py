"""What the console's pages tell a person, on both databases: which deployments
offer a rollback and how a rollback is named, the last deployment in the status
panel, backups' comments and sizes, webhooks whose receiver fails, a page that
does not exist, and a task id that is not one. (test_console.py: signing in and
the guards of every request; test_console_browser.py: the pages in a real browser.)"""

import re

import pytest

from control_plane.services.webhooks import delivery
from tests.control_plane.console.test_console import Browser, _user
from tests.control_plane.webhooks.test_delivery import event, hook
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures


def _text(r):
    return r.get_data(as_text=True)


@pytest.fixture
def member(app, world):
    """An organization, and a browser signed in as its user who may deploy."""
    org = world.org()
    b = Browser(app)
    assert b.sign_in(_user(world, org).email).status_code == 303
    return org, b


@pytest.fixture
def receiver(app, https_receiver, trust_ca):  # noqa: F811 - fixtures by name
    settings = app.extensions["berth"].settings
    settings["WEBHOOK_ALLOW_PRIVATE"] = True
    settings["WEBHOOK_CA_BUNDLE"] = trust_ca
    return https_receiver


def _webhook_row(page, url):
    return re.search(rf"<tr>(?:(?!</tr>).)*{re.escape(url)}(?:(?!</tr>).)*</tr>", page,
                     re.S).group(0)


def test_a_failing_receiver_is_visible_on_the_webhooks_page(app, world, member, receiver):
    org, b = member
    project = world.project(org)
    failing, _ = hook(org, receiver.url + "/failing")
    healthy, _ = hook(org, receiver.url + "/healthy")
    receiver.respond(then=500, path="/failing")
    for _ in range(20):
        event(org, project)
    delivery.run(app.extensions["berth"].settings)
    receiver.wait_for(40)
    page = _text(b.get("/webhooks"))
    row = _webhook_row(page, failing.url)
    # No delivery has failed for good yet (failure_count 0), but all twenty retry.
    assert re.search(r"<td>0</td>", row) and "20 retrying" in row, row
    assert "HTTP 500" in row, row
    row = _webhook_row(page, healthy.url)
    assert "0 retrying" not in row and "delivered" in row, row
    assert "HTTP 200" in row, row
    page = _text(b.get(f"/webhooks/{failing.id}"))
    assert "20 deliveries retrying · 0 failed" in page
