"""Adding a server reached over SSH: POST /servers (who may, what it checks, the
quota), the organization's key (made once, its private half sealed), how GET
/servers shows each kind of server, and the admin CLI. The connections
themselves are tested against a real sshd in tests/e2e/servers/test_ssh_servers.py;
here the app makes none (no SSH link)."""

import base64
import subprocess

import pytest

from control_plane.models import OrgSshKey, Server
from control_plane.services.servers import ssh as ssh_svc
from tests.conftest import auth
from tests.support.agents import registered_server

P = "/api/public/v1"
HOST = "203.0.113.7"  # documentation range: never dialled here (no SSH link in these tests)


@pytest.fixture
def org_rw(app, world):
    app.extensions["berth"].ssh = None
    org = world.org(quota=2)
    return org, auth(world.key(org, server_registration=True)[0])


def test_an_ssh_server_is_added_with_the_organizations_key(client, org_rw, world):
    org, key = org_rw
    r = client.post(f"{P}/servers", headers=key, json={
        "name": "db-box", "ssh_host": HOST, "ssh_port": 2222, "ssh_username": "deploy"})
    assert r.status_code == 201, r.json
    body = r.json
    assert body["connection"] == "ssh" and body["reachable"] is False
    assert body["unreachable_since"] is None  # never checked yet
    assert body["ssh"] == {"host": HOST, "port": 2222, "username": "deploy",
                           "host_key_fingerprint": None, "offered_host_key_fingerprint": None,
                           "checked_at": None, "error": None}
    assert body["ssh_public_key"].startswith("ssh-ed25519 ")
    # One key per organization, made once; the private half is stored sealed.
    again = client.post(f"{P}/servers", headers=key, json={"name": "b", "ssh_host": HOST})
    assert again.status_code == 201 and again.json["ssh_public_key"] == body["ssh_public_key"]
    row = OrgSshKey.get(OrgSshKey.organization == org.id)
    assert "PRIVATE KEY" not in row.private_key_sealed
    assert "OPENSSH PRIVATE KEY" in ssh_svc.org_key(org.id)[1]
    other = world.org()
    assert ssh_svc.org_key(other.id)[0] != body["ssh_public_key"]
    # The quota (2) counts SSH servers like any other.
    full = client.post(f"{P}/servers", headers=key, json={"name": "c", "ssh_host": HOST})
    assert full.status_code == 409 and full.json["error"] == "server_quota_exceeded"

    listed = client.get(f"{P}/servers", headers=key).json["data"]
    assert {s["name"]: s["connection"] for s in listed} == {"db-box": "ssh", "b": "ssh"}
    assert Server.get_by_id(body["id"]).agent_credential_hash is None  # until first contact


def test_a_host_key_given_up_front_is_pinned(client, org_rw, tmp_path):
    org, key = org_rw
    path = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    line = path.with_suffix(".pub").read_text()
    r = client.post(f"{P}/servers", headers=key, json={"name": "a", "ssh_host": HOST,
                                                       "ssh_host_key": line})
    assert r.status_code == 201, r.json
    shown = subprocess.run(["ssh-keygen", "-l", "-f", str(path.with_suffix(".pub"))],
                           capture_output=True, text=True, check=True).stdout.split()[1]
    assert r.json["ssh"]["host_key_fingerprint"] == shown


@pytest.mark.parametrize("body, field", [
    ({"name": "a"}, "ssh_host"),
    ({"name": "a", "ssh_host": "not a host"}, "ssh_host"),
    ({"name": "a", "ssh_host": "-x.example.com"}, "ssh_host"),
    ({"name": "a", "ssh_host": HOST, "ssh_port": 0}, "ssh_port"),
    ({"name": "a", "ssh_host": HOST, "ssh_port": 70000}, "ssh_port"),
    ({"name": "a", "ssh_host": HOST, "ssh_username": "root; rm -rf /"}, "ssh_username"),
    ({"name": "a", "ssh_host": HOST, "ssh_host_key": "ssh-ed25519 notbase64"}, "ssh_host_key"),
    ({"name": "a", "ssh_host": HOST,
      "ssh_host_key": "ssh-dss " + base64.b64encode(b"x" * 40).decode()}, "ssh_host_key"),
    ({"name": "", "ssh_host": HOST}, "name"),
])
def test_bad_input_is_refused_and_changes_nothing(client, org_rw, body, field):
    org, key = org_rw
    r = client.post(f"{P}/servers", headers=key, json=body)
    assert r.status_code in (400, 422), r.json
    assert field in str(r.json)
    assert Server.select().where(Server.organization == org.id).count() == 0


def test_who_may_add_an_ssh_server(client, app, world):
    app.extensions["berth"].ssh = None
    org = world.org()
    body = {"name": "a", "ssh_host": HOST}
    plain = client.post(f"{P}/servers", headers=auth(world.key(org)[0]), json=body)
    assert plain.status_code == 403 and plain.json["error"] == "server_registration_not_enabled"
    reader = client.post(f"{P}/servers", headers=auth(world.key(org, "read_only")[0]), json=body)
    assert reader.status_code == 403
    # A key that may not add servers learns nothing from the body's validation.
    assert client.post(f"{P}/servers", headers=auth(world.key(org)[0]),
                       json={"ssh_port": "x"}).status_code == 403
    assert Server.select().where(Server.organization == org.id).count() == 0


def test_agent_servers_say_how_they_are_reached(client, app, world):
    org = world.org()
    server, _ = registered_server(org)
    key = auth(world.key(org)[0])
    row = next(s for s in client.get(f"{P}/servers", headers=key).json["data"]
               if s["id"] == str(server.id))
    assert row["connection"] == "agent" and row["ssh"] is None
    assert row["reachable"] is False and row["unreachable_since"] is None  # never connected


def test_accepting_a_host_key_needs_one_offered(client, org_rw, world):
    org, key = org_rw
    made = client.post(f"{P}/servers", headers=key, json={"name": "a", "ssh_host": HOST}).json
    r = client.post(f"{P}/servers/{made['id']}/accept-host-key", headers=key)
    assert r.status_code == 409 and r.json["error"] == "conflict"
    other = world.org()
    foreign = client.post(f"{P}/servers/{made['id']}/accept-host-key",
                          headers=auth(world.key(other, server_registration=True)[0]))
    assert foreign.status_code == 404


def test_of_several_schedulers_one_checks_each_server(client, org_rw, fake_clock):
    org, key = org_rw
    made = [client.post(f"{P}/servers", headers=key, json={"name": n, "ssh_host": HOST}).json["id"]
            for n in ("a", "b")]
    assert sorted(ssh_svc.ssh_server_ids(claim_for=30)) == sorted(made)
    assert ssh_svc.ssh_server_ids(claim_for=30) == []  # another scheduler, the same turn
    fake_clock.advance(seconds=25)
    assert sorted(ssh_svc.ssh_server_ids(claim_for=30)) == sorted(made)  # the next turn
    assert sorted(ssh_svc.ssh_server_ids()) == sorted(made)  # unclaimed: an explicit check
