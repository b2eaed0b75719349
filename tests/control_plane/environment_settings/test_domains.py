"""Custom domains on /api/v1: added, verified by DNS (a TXT record or a CNAME,
looked up at a DNS server on loopback), removed; `url` following them; names
refused; pending claims that block no one (the first DNS proof wins, claims
expire), one name for one environment within an organization."""

import threading

import pytest

from control_plane.models import CustomDomain, Environment
from control_plane.services import housekeeping
from control_plane.services.accounts import orgs

V1 = "/api/v1"
DEPLOY = ("project.environments.deploy",)


@pytest.fixture
def dns(app, loopback_dns):
    app.config.update(DNS_RESOLVER=loopback_dns.address, DNS_TIMEOUT=2)
    loopback_dns.clear()
    yield loopback_dns
    loopback_dns.clear()


class Member:
    def __init__(self, world, org=None, permissions=DEPLOY):
        self.org = org or world.org()
        self.user = world.user(self.org, permissions)
        self.h = {"Authorization": f"Bearer {orgs.issue_user_token(self.user.id)}"}
        self.project = world.project(self.org)
        self.env = world.environment(self.project)

    def domains(self, env=None):
        return f"{V1}/environments/{(env or self.env).id}/domains"


@pytest.fixture
def m(world):
    return Member(world)


def public_url(client, world, member):
    raw, _ = world.key(member.org)
    r = client.get(f"/api/public/v1/environments/{member.env.id}",
                   headers={"Authorization": f"Bearer {raw}"})
    assert r.status_code == 200, r.json
    return r.json["url"]


def platform(env):
    return f"{env.id.hex[:12]}.apps.localhost"


def test_added_pending_then_verified_by_txt_then_removed(client, world, m, dns):
    assert public_url(client, world, m) == f"https://{platform(m.env)}"
    r = client.post(m.domains(), headers=m.h, json={"domain": "ERP.Example.co.uk."})
    assert r.status_code == 201, r.json
    added = r.json
    assert (added["domain"], added["status"], added["verified_at"]) == (
        "erp.example.co.uk", "pending", None)
    txt = added["verification"]["txt"]
    assert txt["name"] == "_berth-challenge.erp.example.co.uk"
    assert txt["value"].startswith("berth-verify=") and len(txt["value"]) > 20
    assert added["verification"]["cname"] == {"name": "erp.example.co.uk",
                                              "target": platform(m.env)}

    verify = f"{m.domains()}/erp.example.co.uk/verify"
    r = client.post(verify, headers=m.h)  # nothing published yet
    assert r.status_code == 409 and r.json["error"] == "domain_not_verified", r.json
    assert "no TXT record" in r.json["message"]
    assert r.json["details"]["txt"] == txt
    dns.txt(txt["name"], "berth-verify=someone-elses-token")
    r = client.post(verify, headers=m.h)
    assert r.status_code == 409 and "someone-elses-token" in r.json["message"]
    listed = client.get(m.domains(), headers=m.h).json["items"]
    assert listed[0]["status"] == "pending" and listed[0]["checked_at"]
    assert "someone-elses-token" in listed[0]["check_error"]
    assert public_url(client, world, m) == f"https://{platform(m.env)}"

    dns.txt(txt["name"], "v=spf1 -all", txt["value"])
    r = client.post(verify, headers=m.h)
    assert r.status_code == 200, r.json
    assert r.json["status"] == "verified" and r.json["verified_at"]
    assert r.json["check_error"] is None
    assert public_url(client, world, m) == "https://erp.example.co.uk"
    dns.clear()  # verified stays verified: a second verify looks nothing up
    assert client.post(verify, headers=m.h).json["status"] == "verified"

    r = client.delete(f"{m.domains()}/erp.example.co.uk", headers=m.h)
    assert r.status_code == 204
    assert client.get(m.domains(), headers=m.h).json == {"items": []}
    assert public_url(client, world, m) == f"https://{platform(m.env)}"
    assert client.delete(f"{m.domains()}/erp.example.co.uk", headers=m.h).status_code == 404


def test_verified_by_a_cname_to_the_platform_host(client, world, m, dns):
    assert client.post(m.domains(), headers=m.h, json={"domain": "shop.example.io"}) \
        .status_code == 201
    dns.cname("shop.example.io", "somewhere-else.example.io")
    r = client.post(f"{m.domains()}/shop.example.io/verify", headers=m.h)
    assert r.status_code == 409 and "CNAME to somewhere-else.example.io" in r.json["message"]
    dns.cname("shop.example.io", platform(m.env).upper())
    r = client.post(f"{m.domains()}/shop.example.io/verify", headers=m.h)
    assert r.status_code == 200 and r.json["status"] == "verified", r.json
    assert public_url(client, world, m) == "https://shop.example.io"


def test_url_is_the_oldest_verified_domain_and_falls_back_in_order(client, world, m, dns):
    for name in ("a.example.io", "b.example.io"):
        assert client.post(m.domains(), headers=m.h, json={"domain": name}).status_code == 201
    for name in ("b.example.io", "a.example.io"):  # b verified first
        dns.cname(name, platform(m.env))
        assert client.post(f"{m.domains()}/{name}/verify", headers=m.h).status_code == 200
    assert public_url(client, world, m) == "https://b.example.io"
    assert client.delete(f"{m.domains()}/b.example.io", headers=m.h).status_code == 204
    assert public_url(client, world, m) == "https://a.example.io"


def test_internationalized_names_are_kept_in_their_idna_form(client, m, dns):
    r = client.post(m.domains(), headers=m.h, json={"domain": "bücher.example.de"})
    assert r.status_code == 201, r.json
    assert r.json["domain"] == "xn--bcher-kva.example.de"
    r = client.post(f"{m.domains()}/bücher.example.de/verify", headers=m.h)
    assert r.status_code == 409 and r.json["error"] == "domain_not_verified"


@pytest.mark.parametrize("name", [
    " ", "localhost", "erp", "erp.localhost", "x.test", "x.example", "x.invalid",
    "shop.local", "a.onion", "host.internal", "1.0.0.127.in-addr.arpa", "example.com",
    "erp.example.org", "127.0.0.1", "[::1]", "::1", "10.0.0.1", "1.2.3.4.5", "*.example.io",
    "a_b.example.io", "-a.example.io", "a-.example.io", "a..example.io", ".example.io",
    "erp.example.io/x", "erp.example.io:443", "https://erp.example.io", "erp example.io",
    "a" * 64 + ".example.io", ".".join(["abcdefghi"] * 26) + ".io", "erp.example.123",
    "apps.localhost", "x.apps.localhost", "erp.example.io\x00", "erp.exa\ud800mple.io",
])
def test_names_no_certificate_authority_would_sign_are_refused(client, m, dns, name):
    r = client.post(m.domains(), headers=m.h, json={"domain": name})
    if "\x00" in name or "\ud800" in name:  # refused for every field, before the view
        assert (r.status_code, r.json["error"]) == (400, "bad_request"), r.json
    else:
        assert (r.status_code, r.json["error"]) == (422, "invalid_domain"), (name, r.json)
    assert r.json["message"]
    assert CustomDomain.select().count() == 0


def test_names_under_the_platform_apps_domain_are_refused(app, client, m, dns):
    app.config["APPS_DOMAIN"] = "apps.berth.example.io"  # a public apps domain
    for name in ("apps.berth.example.io", "x.apps.berth.example.io"):
        r = client.post(m.domains(), headers=m.h, json={"domain": name})
        assert r.status_code == 422 and "platform" in r.json["message"], r.json
    assert client.post(m.domains(), headers=m.h,
                       json={"domain": "berth.example.io"}).status_code == 201


@pytest.mark.parametrize("body", [{}, {"domain": None}, {"domain": 5}, {"name": "a.example.io"}, {"domain": ""},
                                  {"domain": ["a.example.io"]}, {"domain": "a" * 301}])
def test_bad_bodies_are_422(client, m, body):
    r = client.post(m.domains(), headers=m.h, json=body)
    assert r.status_code == 422 and r.json["error"] == "validation_error", r.json
    assert CustomDomain.select().count() == 0


def _add(client, member, name, env=None):
    return client.post(member.domains(env), headers=member.h, json={"domain": name})


def _txt_value(client, member, name):
    [d] = [d for d in client.get(member.domains(), headers=member.h).json["items"]
           if d["domain"] == name]
    return d["verification"]["txt"]["value"]


def test_a_pending_claim_blocks_no_one_and_the_first_proof_wins(client, world, m, dns):
    squatter, owner = Member(world), m
    assert _add(client, squatter, "erp.example.io").status_code == 201
    # Whatever the spelling, the owner's add is not refused, and says nothing of it.
    r = _add(client, owner, "ERP.Example.IO.")
    assert r.status_code == 201 and r.json["domain"] == "erp.example.io", r.json
    assert r.json["verification"]["txt"]["value"] != _txt_value(client, squatter,
                                                                "erp.example.io")
    # A claim does not prove: the squatter's verify finds nothing of its own.
    dns.txt("_berth-challenge.erp.example.io", r.json["verification"]["txt"]["value"])
    r = client.post(f"{squatter.domains()}/erp.example.io/verify", headers=squatter.h)
    assert r.status_code == 409 and r.json["error"] == "domain_not_verified", r.json
    r = client.post(f"{owner.domains()}/erp.example.io./verify", headers=owner.h)
    assert r.status_code == 200 and r.json["status"] == "verified", r.json
    assert public_url(client, world, owner) == "https://erp.example.io"
    # The squatter's pending claim is gone.
    assert client.get(squatter.domains(), headers=squatter.h).json == {"items": []}
    assert client.post(f"{squatter.domains()}/erp.example.io/verify",
                       headers=squatter.h).status_code == 404

    # A verified name is kept: a new claim is taken (nothing told), and fails its proof...
    r = _add(client, squatter, "erp.example.io")
    assert r.status_code == 201, r.json
    r = client.post(f"{squatter.domains()}/erp.example.io/verify", headers=squatter.h)
    assert r.status_code == 409 and r.json["error"] == "domain_not_verified", r.json
    # ...and even with its own record published, the first proof keeps the name; the
    # answer (to whoever controls the name's DNS) names no organization or environment.
    dns.txt("_berth-challenge.erp.example.io", _txt_value(client, squatter, "erp.example.io"))
    r = client.post(f"{squatter.domains()}/erp.example.io/verify", headers=squatter.h)
    assert r.status_code == 409 and r.json["error"] == "domain_in_use", r.json
    assert str(owner.env.id) not in r.json["message"]
    assert str(owner.org.id) not in r.json["message"]
    assert CustomDomain.get(CustomDomain.status == "verified").environment_id == owner.env.id
    assert public_url(client, world, owner) == "https://erp.example.io"


def test_within_an_organization_a_name_is_one_environments(client, world, m, dns):
    second = world.environment(m.project)
    assert _add(client, m, "erp.example.io").status_code == 201
    r = _add(client, m, "ERP.example.io.")
    assert r.status_code == 409 and r.json["error"] == "domain_in_use", r.json
    assert "this environment" in r.json["message"]
    r = _add(client, m, "erp.example.io", env=second)
    assert r.status_code == 409 and r.json["error"] == "domain_in_use", r.json
    assert str(m.env.id) in r.json["message"]  # which of its own environments has it
    # Someone else cannot verify, read or remove it through their own environment.
    other = Member(world)
    assert client.post(f"{other.domains()}/erp.example.io/verify",
                       headers=other.h).status_code == 404
    assert client.delete(f"{other.domains()}/erp.example.io", headers=other.h).status_code == 404
    assert client.get(m.domains(), headers=other.h).status_code == 404
    assert client.post(m.domains(), headers=other.h,
                       json={"domain": "x.example.io"}).status_code == 404
    # Removed, the name is free for its other environment.
    assert client.delete(f"{m.domains()}/erp.example.io", headers=m.h).status_code == 204
    assert _add(client, m, "erp.example.io", env=second).status_code == 201


def test_concurrent_proofs_of_one_name_leave_one_verified(app, client, world, dns):
    members = [Member(world) for _ in range(4)]
    for member in members:
        assert _add(client, member, "race.example.io").status_code == 201
    dns.txt("_berth-challenge.race.example.io",
            *[_txt_value(client, mb, "race.example.io") for mb in members])
    start, answers = threading.Barrier(4), []

    def verify(member):
        c = app.test_client()
        start.wait()
        answers.append(c.post(f"{member.domains()}/race.example.io/verify", headers=member.h))

    threads = [threading.Thread(target=verify, args=(mb,)) for mb in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # One wins; the others lose to its proof (409), or find their claim already
    # dropped by it (404).
    assert [r.status_code for r in answers].count(200) == 1, [r.json for r in answers]
    assert {(r.status_code, r.json["error"]) for r in answers if r.status_code != 200} <= {
        (409, "domain_in_use"), (404, "not_found")}, [r.json for r in answers]
    rows = list(CustomDomain.select().where(CustomDomain.name == "race.example.io"))
    assert [d.status for d in rows] == ["verified"]


def test_pending_claims_expire_after_7_days(client, world, m, dns, fake_clock):
    assert _add(client, m, "old.example.io").status_code == 201
    assert _add(client, m, "kept.example.io").status_code == 201
    dns.cname("kept.example.io", platform(m.env))
    assert client.post(f"{m.domains()}/kept.example.io/verify", headers=m.h).status_code == 200
    fake_clock.advance(days=6, hours=23)
    assert housekeeping.run()["domain_claims"] == 0
    assert _add(client, m, "new.example.io").status_code == 201
    fake_clock.advance(hours=2)
    assert housekeeping.run()["domain_claims"] == 1
    names = [d["domain"] for d in client.get(m.domains(), headers=m.h).json["items"]]
    assert names == ["kept.example.io", "new.example.io"]


def test_permissions(client, world, m, dns):
    reader = Member(world, org=m.org, permissions=())
    assert client.get(m.domains(), headers=reader.h).status_code == 200
    r = client.post(m.domains(), headers=reader.h, json={"domain": "erp.example.io"})
    assert r.status_code == 403 and r.json["error"] == "permission_denied"
    assert client.get(m.domains()).status_code == 401
    assert client.post(m.domains(), headers=m.h, json={"domain": "erp.example.io"}) \
        .status_code == 201
    for call in (client.post, client.delete):
        path = f"{m.domains()}/erp.example.io" + ("/verify" if call == client.post else "")
        assert call(path, headers=reader.h).status_code == 403
    assert CustomDomain.get().status == "pending"


def test_an_environment_has_at_most_20_domains(client, m, dns):
    for i in range(20):
        assert client.post(m.domains(), headers=m.h,
                           json={"domain": f"d{i}.example.io"}).status_code == 201
    r = client.post(m.domains(), headers=m.h, json={"domain": "d20.example.io"})
    assert r.status_code == 409 and r.json["error"] == "domain_limit_reached"


def test_a_resolver_that_does_not_answer_is_502_and_decides_nothing(app, client, m, dns):
    assert client.post(m.domains(), headers=m.h, json={"domain": "erp.example.io"}) \
        .status_code == 201
    # Changed in the app's config: the services read the same settings.
    app.config["DNS_RESOLVER"], app.config["DNS_TIMEOUT"] = "127.0.0.1:9", 0.5
    r = client.post(f"{m.domains()}/erp.example.io/verify", headers=m.h)
    assert r.status_code == 502 and r.json["error"] == "dns_unavailable", r.json
    d = CustomDomain.get()
    assert (d.status, d.checked_at, d.check_error) == ("pending", None, None)
    assert Environment.get_by_id(m.env.id).custom_domain is None
