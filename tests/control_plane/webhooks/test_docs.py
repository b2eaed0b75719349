"""docs/webhooks.md: its receiver-side verification code, run as written against a
real delivery captured by the HTTPS receiver."""

import re
import time
from pathlib import Path

import pytest

from control_plane import events
from control_plane.agent_link import Plain
from control_plane.infra import secretbox
from control_plane.infra.db import database
from control_plane.models import Webhook
from control_plane.services.webhooks import delivery, subscriptions
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures

DOC = Path(__file__).resolve().parents[3] / "docs" / "webhooks.md"


def doc_code():
    """The Python block under "Receiver-side verification (Python)", as a namespace."""
    text = DOC.read_text()
    section = text.split("### Receiver-side verification (Python)", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace = {"__name__": "receiver_example"}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace


def test_the_documented_receiver_code_verifies_a_real_delivery(app, world, https_receiver,  # noqa: F811
                                                               trust_ca):  # noqa: F811
    settings = app.extensions["berth"].settings
    settings["WEBHOOK_ALLOW_PRIVATE"] = True
    settings["WEBHOOK_CA_BUNDLE"] = trust_ca
    org = world.org()
    project = world.project(org)
    secret = subscriptions.new_secret()
    Webhook.create(organization=org, url=https_receiver.url + "/hook",
                   events=["environment.created"],
                   secret_encrypted=secretbox.seal(secret, subscriptions.SECRET_PURPOSE))
    with database.atomic():
        ev = events.record_event(org.id, project.id, "environment.created",
                                      {"environment_id": "e", "project_id": str(project.id),
                                       "name": "staging"})
    delivery.run(Plain(settings))
    (got,) = https_receiver.wait_for(1)
    headers = dict(got.headers.items())

    code = doc_code()
    event = code["handle"](got.body, headers, secret)
    assert event["event_id"] == str(ev.event_id) and event["data"]["name"] == "staging"

    invalid = code["InvalidSignature"]
    with pytest.raises(invalid):  # a changed body
        code["handle"](got.body.replace(b"staging", b"prod"), headers, secret)
    with pytest.raises(invalid):  # another secret
        code["handle"](got.body, headers, subscriptions.new_secret())
    with pytest.raises(invalid):  # a replay after the 5 minute tolerance
        code["verify_standard_signature"](got.body, headers, secret, now=time.time() + 301)
    code["verify_standard_signature"](got.body, headers, secret, now=time.time() + 250)
    with pytest.raises(invalid):  # the SVC signature alone is checked too
        code["verify_svc_signature"](got.body, {**headers, "X-SVC-Signature": "sha256=00"},
                                     secret)
