"""protocol.wire: each payload crosses in the form the other side's revision reads,
and comes out as the dict the handlers read."""

import json

import pytest

from protocol import wire
from protocol.kinds import CommandKind
from protocol.v1 import agent_pb2 as pb

PROXY = {"image": "caddy:2", "acme_directory": "https://acme.test/dir",
         "acme_email": None, "acme_roots_pem": "-----BEGIN CERTIFICATE-----"}
ENVIRONMENT = {"environment_id": "e1", "deployment_id": "d1", "erp_image": "odoo:17.0",
               "variables": {"A": "1"}, "delete_data": True, "proxy": PROXY,
               "hostnames": ["a.apps.test", "erp.example.com"]}


@pytest.mark.parametrize("kind", sorted(wire.ENVIRONMENT_KINDS))
def test_environment_commands_are_typed_from_revision_2(kind):
    message = wire.command("c1", kind, ENVIRONMENT, revision=2)
    assert message.HasField("environment") and message.payload_json == ""
    assert wire.payload(message) == {"environment_id": "e1", "delete_data": True,
                                     "proxy": PROXY, "hostnames": ENVIRONMENT["hostnames"]}
    # what the agent needs, and nothing of the deploy's configuration
    assert "variables" not in str(message) and "odoo:17.0" not in str(message)


@pytest.mark.parametrize("kind", sorted(wire.ENVIRONMENT_KINDS))
def test_agents_before_revisions_read_json(kind):
    message = wire.command("c1", kind, ENVIRONMENT, revision=0)
    assert not message.HasField("environment")
    assert json.loads(message.payload_json) == ENVIRONMENT == wire.payload(message)


def test_a_command_without_a_proxy_says_so():
    message = wire.command("c1", CommandKind.STOP, {"environment_id": "e1"}, revision=2)
    assert not message.environment.HasField("proxy")
    assert wire.payload(message)["proxy"] is None


@pytest.mark.parametrize("kind", [k for k in CommandKind if k not in wire.ENVIRONMENT_KINDS])
def test_the_other_kinds_stay_json(kind):
    message = wire.command("c1", kind, ENVIRONMENT, revision=2)
    assert not message.HasField("environment")
    assert wire.payload(message) == ENVIRONMENT


def test_a_proxy_report_round_trips():
    report = {"running": False, "reason": "port 443 is taken",
              "certificates": {"a.apps.test": {"state": "valid", "valid_until": "2027-01-01",
                                               "reason": None},
                               "erp.example.com": {"state": "failing", "valid_until": None,
                                                   "reason": "NXDOMAIN"}}}
    message = wire.proxy_report(report)
    assert message.HasField("state") and message.state_json == ""
    assert wire.proxy_state(pb.ProxyReport.FromString(message.SerializeToString())) == report


def test_a_proxy_report_from_an_agent_before_revisions():
    legacy = pb.ProxyReport(state_json=json.dumps({"running": True, "certificates": {}}))
    assert wire.proxy_state(legacy) == {"running": True, "certificates": {}}
    for junk in ("", "[1, 2]", "not json"):
        with pytest.raises(ValueError):
            wire.proxy_state(pb.ProxyReport(state_json=junk))


def test_an_agent_needs_a_gateway_of_its_revision():
    assert wire.gateway_too_old(pb.Welcome(revision=wire.REVISION)) is None
    assert wire.gateway_too_old(pb.Welcome(revision=wire.REVISION + 1)) is None
    said = wire.gateway_too_old(pb.Welcome())  # a gateway from before revisions
    assert f"revision 0, older than this agent's {wire.REVISION}" in said and "upgrade" in said
