"""Webhooks reach globally reachable unicast addresses only: one address inside every
entry of the IANA IPv4 and IPv6 special-purpose registries (plus multicast and the
IPv6 space outside 2000::/3) is refused when a webhook is created and when it is
delivered; addresses just outside a few of them are accepted.

The list below is written from the registries themselves, not from the code's table,
so an entry missing from the table fails here."""

import ipaddress

import pytest

from control_plane.models import Webhook
from control_plane.services.webhooks import net, special_addresses, urls
from tests.conftest import auth

P = "/api/public/v1"

# (address inside the range, the range as IANA lists it)
INSIDE = [
    ("0.1.2.3", "0.0.0.0/8"), ("0.0.0.0", "0.0.0.0/32"), ("10.20.30.40", "10.0.0.0/8"),
    ("100.100.0.1", "100.64.0.0/10"), ("127.8.9.10", "127.0.0.0/8"),
    ("169.254.1.1", "169.254.0.0/16"), ("172.31.255.254", "172.16.0.0/12"),
    ("192.0.0.100", "192.0.0.0/24"), ("192.0.0.3", "192.0.0.0/29"),
    ("192.0.0.8", "192.0.0.8/32"), ("192.0.0.9", "192.0.0.9/32"),
    ("192.0.0.10", "192.0.0.10/32"), ("192.0.0.170", "192.0.0.170/32"),
    ("192.0.0.171", "192.0.0.171/32"), ("192.0.2.33", "192.0.2.0/24"),
    ("192.31.196.1", "192.31.196.0/24"), ("192.52.193.1", "192.52.193.0/24"),
    ("192.88.99.1", "192.88.99.0/24"), ("192.168.77.1", "192.168.0.0/16"),
    ("192.175.48.6", "192.175.48.0/24"), ("198.19.0.1", "198.18.0.0/15"),
    ("198.51.100.7", "198.51.100.0/24"), ("203.0.113.9", "203.0.113.0/24"),
    ("239.1.2.3", "224.0.0.0/4"), ("250.1.2.3", "240.0.0.0/4"),
    ("255.255.255.255", "255.255.255.255/32"),
    ("::1", "::1/128"), ("::", "::/128"), ("::ffff:10.0.0.1", "::ffff:0:0/96"),
    ("64:ff9b::7f00:1", "64:ff9b::/96"), ("64:ff9b:1::808:808", "64:ff9b:1::/48"),
    ("100::1", "100::/64"), ("100:0:0:1::1", "100:0:0:1::/64"),
    ("2001:100::1", "2001::/23"), ("2001:0:4136:e378::1", "2001::/32"),
    ("2001:1::1", "2001:1::1/128"), ("2001:1::2", "2001:1::2/128"),
    ("2001:1::3", "2001:1::3/128"), ("2001:2::5", "2001:2::/48"),
    ("2001:3::1", "2001:3::/32"), ("2001:4:112::1", "2001:4:112::/48"),
    ("2001:10::1", "2001:10::/28"), ("2001:20::1", "2001:20::/28"),
    ("2001:30::1", "2001:30::/28"), ("2001:db8::1", "2001:db8::/32"),
    ("2002:808:808::1", "2002::/16"), ("2620:4f:8000::1", "2620:4f:8000::/48"),
    ("3fff::1", "3fff::/20"), ("3fff:fff:ffff::1", "3fff::/20"), ("5f00::1", "5f00::/16"),
    ("fd12:3456::1", "fc00::/7"), ("fe80::1", "fe80::/10"), ("ff0e::1", "ff00::/8"),
]
# Outside every registry entry but not global unicast either (IPv6 Address Space).
RESERVED_V6 = ["::127.0.0.1", "fec0::1", "4000::1", "1::1"]

# Just outside a range: public unicast, accepted.
OUTSIDE = [
    "1.0.0.1", "100.63.255.255", "100.128.0.0",
    "172.15.255.255", "172.32.0.0", "192.0.1.0", "192.88.98.255", "192.88.100.0",
    "198.17.255.255", "198.20.0.0", "223.255.255.254", "::ffff:8.8.8.8", "64:ff9b::808:808",
    "2001:200::1", "2001:db7:ffff::1", "2001:db9::1", "3fff:1000::1", "2620:4f:7fff::1",
    "2620:4f:8001::1", "2a00:1450:4001::1",
]


def _host(address):
    return f"[{address}]" if ":" in address else address


def _ids(cases):
    return [c[0] if isinstance(c, tuple) else c for c in cases]


def test_every_table_entry_is_tested_and_each_address_hits_its_own_entry():
    for address, iana in INSIDE:
        assert str(special_addresses.lookup(ipaddress.ip_address(address)).network) == iana
    assert {str(e.network) for e in special_addresses.TABLE} == {iana for _, iana in INSIDE}


@pytest.mark.parametrize("address, iana", INSIDE + [(a, "reserved") for a in RESERVED_V6],
                         ids=_ids(INSIDE) + RESERVED_V6)
def test_delivery_refuses_every_special_range(monkeypatch, address, iana):
    ip = ipaddress.ip_address(address)
    reason = urls.blocked_reason(ip)
    assert reason, f"{address} ({iana}) passed the address check"
    # An IP literal: refused before any connection.
    result = net.post(f"https://{_host(address)}:9443/", b"{}", {}, timeout=2)
    assert not result.ok and result.status_code is None
    assert result.error.startswith(f"refused: {ip.compressed} is a"), result.error
    # A name resolving to it (checked again at send time).
    monkeypatch.setattr(net, "resolve", lambda host, port: [address])
    result = net.post("https://hooks.example.test/", b"{}", {}, timeout=2)
    assert result.error == f"refused: hooks.example.test resolves to {ip} ({reason})"


@pytest.mark.parametrize("address", OUTSIDE)
def test_addresses_just_outside_the_ranges_pass(address):
    assert urls.blocked_reason(ipaddress.ip_address(address)) is None
    assert urls.check_url(f"https://{_host(address)}/h")


@pytest.mark.parametrize("address", [a for a, _ in INSIDE] + RESERVED_V6)
def test_create_refuses_every_special_range(client, world, address):
    org = world.org()
    raw, _ = world.key(org)
    r = client.post(f"{P}/webhooks", headers=auth(raw),
                    json={"url": f"https://{_host(address)}:9443/", "events": ["deploy.failed"]})
    assert r.status_code == 422 and r.json["error"] == "invalid_webhook_url", (address, r.json)
    assert "public address" in r.json["message"]
    assert Webhook.select().count() == 0


def test_create_accepts_a_public_address_and_allow_private_still_opens_the_rest(
        client, world, app):
    org = world.org()
    raw, _ = world.key(org)
    body = {"url": "https://192.0.1.1:9443/", "events": ["deploy.failed"]}
    assert client.post(f"{P}/webhooks", headers=auth(raw), json=body).status_code == 201
    settings = app.extensions["berth"].settings
    settings["WEBHOOK_ALLOW_PRIVATE"] = True
    try:
        body["url"] = "https://192.0.0.8:9443/"
        assert client.post(f"{P}/webhooks", headers=auth(raw), json=body).status_code == 201
    finally:
        settings["WEBHOOK_ALLOW_PRIVATE"] = False
