"""Registration tokens: the three endpoints through HTTP, and the agent's side
(consume_token) at the service level, where the gateway calls it."""

import datetime as dt
import threading
import uuid

import pytest

from control_plane.infra import security
from control_plane.infra.db import database
from control_plane.models import ApiKey, Project, RegistrationToken, Server
from control_plane.services import agents
from control_plane.services.servers import registration
from control_plane.vocabulary.errors import ApiError
from tests.conftest import auth, new_uuid

P = "/api/public/v1"
TOKENS = f"{P}/servers/registration-tokens"
CREATED_KEYS = {"token_id", "token", "install_command", "expires_at", "status"}
LISTED_KEYS = {"token_id", "token_prefix", "server_name", "status", "expires_at", "created_at",
               "created_by_name"}
FACTS = {"hostname": "box-1.example.net", "cpu_cores": 4, "ram_mb": 7961, "disk_gb": 78}


def iso(moment):
    return moment.isoformat(timespec="milliseconds") + "Z"


@pytest.fixture
def org_rw(world):
    """An organization (quota 3) and a full-access key that may register servers."""
    org = world.org(quota=3)
    raw, _ = world.key(org, server_registration=True)
    return org, raw


def create(client, raw, **body):
    r = client.post(TOKENS, headers=auth(raw), json=body)
    assert r.status_code == 201, r.json
    return r.json


def listing(client, raw):
    r = client.get(TOKENS, headers=auth(raw))
    assert r.status_code == 200, r.json
    return r.json


def stored_rows(table):
    cursor = database.execute_sql(f"SELECT * FROM {table}")
    return [row for row in cursor.fetchall()]


# --- create ------------------------------------------------------------------

def test_create_shape_and_only_the_digest_is_stored(app, client, world, fake_clock):
    org = world.org()
    owner = world.user(org)
    raw_key, _ = world.key(org, server_registration=True, owner_id=owner.id)
    app.config["PUBLIC_URL"] = "https://berth.example.com/"
    r = client.post(TOKENS, headers=auth(raw_key), json={})
    assert r.status_code == 201
    body = r.json
    assert set(body) == CREATED_KEYS
    token = body["token"]
    assert token.startswith("srt_live_") and len(token) == len("srt_live_") + 40
    assert body["status"] == "pending"
    assert body["expires_at"] == iso(fake_clock.now + dt.timedelta(hours=24))  # default 24h
    uuid.UUID(body["token_id"])
    env = "BERTH_CONTROL_PLANE='https://berth.example.com'"
    pipe = f"printf '%s\\n' '{token}' |"
    assert body["install_command"] == (
        """(f=$(mktemp) && trap 'rm -f "$f"' EXIT && """
        """curl -fsSL 'https://berth.example.com/install.sh' -o "$f" && """
        f"""if [ "$(id -u)" -eq 0 ]; then {pipe} {env} sh "$f"; """
        f"""else {pipe} sudo {env} sh "$f"; fi)""")
    # The token is an argument of no program: only the shell's builtin printf sees it.
    assert f"sudo {env}" in body["install_command"] and "BERTH_TOKEN" not in body[
        "install_command"]

    row = RegistrationToken.get_by_id(body["token_id"])
    assert row.token_hash == security.digest(token)
    assert row.token_prefix == token[:17]
    assert (row.server_name, row.ssh_username, row.auto_deploy) == (None, "root", None)
    assert row.created_by_id == owner.id and row.created_by_name == owner.name
    secret_part = token[17:]
    for values in stored_rows("registration_token"):
        for value in values:
            assert secret_part not in str(value)


def test_created_by_name_is_the_key_name_without_an_owner(client, world):
    org = world.org()
    raw, key = world.key(org, server_registration=True)
    create(client, raw)
    [entry] = listing(client, raw)
    assert entry["created_by_name"] == key.name


@pytest.mark.parametrize("choice, delta", [
    ("1h", dt.timedelta(hours=1)), ("6h", dt.timedelta(hours=6)),
    ("24h", dt.timedelta(hours=24)), ("48h", dt.timedelta(hours=48)),
    ("7d", dt.timedelta(days=7)),
])
def test_expiry_choices(client, org_rw, fake_clock, choice, delta):
    _, raw = org_rw
    body = create(client, raw, expires_in=choice)
    assert body["expires_at"] == iso(fake_clock.now + delta)
    assert RegistrationToken.get_by_id(body["token_id"]).expires_at == fake_clock.now + delta


def test_optional_fields_are_stored(client, world, org_rw):
    org, raw = org_rw
    project = world.project(org)  # its server takes one of the three slots
    body = create(client, raw, server_name="  db-2  ", ssh_username="deploy.user",
                  auto_deploy={"project_id": str(project.id)})
    row = RegistrationToken.get_by_id(body["token_id"])
    assert (row.server_name, row.ssh_username) == ("db-2", "deploy.user")
    assert row.auto_deploy == {"project_id": str(project.id), "environment_name": "production",
                               "environment_type": "production", "branch": None}
    body = create(client, raw, server_name=None, auto_deploy={
        "project_id": str(project.id), "environment_name": "qa", "environment_type": "staging",
        "branch": "release/2.0"}, expires_in="1h")
    row = RegistrationToken.get_by_id(body["token_id"])
    assert row.server_name is None
    assert row.auto_deploy == {"project_id": str(project.id), "environment_name": "qa",
                               "environment_type": "staging", "branch": "release/2.0"}


@pytest.mark.parametrize("body, field", [
    ({"expires_in": "2h"}, "expires_in"),
    ({"expires_in": 24}, "expires_in"),
    ({"expires_in": None}, "expires_in"),
    ({"ssh_username": ""}, "ssh_username"),
    ({"ssh_username": "has space"}, "ssh_username"),
    ({"ssh_username": "-root"}, "ssh_username"),
    ({"ssh_username": "root;rm"}, "ssh_username"),
    ({"ssh_username": "u" * 65}, "ssh_username"),
    ({"ssh_username": None}, "ssh_username"),
    ({"server_name": "x" * 256}, "server_name"),
    ({"server_name": ""}, "server_name"),
    ({"server_name": "   "}, "server_name"),
    ({"server_name": 5}, "server_name"),
    ({"auto_deploy": "yes"}, "auto_deploy"),
    ({"auto_deploy": True}, "auto_deploy"),
    ({"auto_deploy": {}}, "auto_deploy"),
    ({"auto_deploy": {"project_id": "not-a-uuid"}}, "auto_deploy"),
    ({"auto_deploy": {"project_id": "PROJECT", "environment_type": "prod"}}, "auto_deploy"),
    ({"auto_deploy": {"project_id": "PROJECT", "environment_name": "x" * 256}}, "auto_deploy"),
    ({"auto_deploy": {"project_id": "PROJECT", "environment_name": ""}}, "auto_deploy"),
    ({"auto_deploy": {"project_id": "PROJECT", "branch": "has space"}}, "auto_deploy"),
    ({"auto_deploy": {"project_id": "PROJECT", "unexpected": 1}}, "auto_deploy"),
    ({"unexpected": 1}, "unexpected"),
])
def test_invalid_body_is_422_and_creates_nothing(client, world, org_rw, body, field):
    org, raw = org_rw
    project = world.project(org)
    if isinstance(body.get("auto_deploy"), dict) and body["auto_deploy"].get("project_id") == "PROJECT":
        body = {"auto_deploy": {**body["auto_deploy"], "project_id": str(project.id)}}
    r = client.post(TOKENS, headers=auth(raw), json=body)
    assert r.status_code == 422, r.json
    assert r.json["error"] == "validation_error" and field in r.json["details"]["json"]
    assert RegistrationToken.select().count() == 0


def test_non_json_body_is_400(client, org_rw):
    _, raw = org_rw
    r = client.post(TOKENS, headers={**auth(raw), "Content-Type": "application/json"}, data="{")
    assert r.status_code == 400
    assert RegistrationToken.select().count() == 0


def test_auto_deploy_project_must_be_the_organizations(client, world, org_rw):
    org, raw = org_rw
    foreign = world.project(world.org())
    gone = world.project(org)
    Project.update(deleted_at=gone.created_at).where(Project.id == gone.id).execute()
    for project_id in (foreign.id, gone.id, new_uuid()):
        r = client.post(TOKENS, headers=auth(raw), json={"auto_deploy": {"project_id": str(project_id)}})
        assert r.status_code == 404 and r.json["error"] == "not_found"
    assert RegistrationToken.select().count() == 0


# --- who may --------------------------------------------------------------------

def test_403_codes_in_the_spec_order(client, world):
    org = world.org()
    project = world.project(org)
    ro_capable, _ = world.key(org, "read_only", server_registration=True)
    ro_plain, _ = world.key(org, "read_only")
    ro_project, _ = world.key(org, "read_only", scope="project", project=project)
    rw_project, _ = world.key(org, scope="project", project=project)
    # A project-scoped key flagged behind the admin tool's back still fails on scope.
    rw_project_flagged, flagged = world.key(org, scope="project", project=project)
    ApiKey.update(server_registration=True).where(ApiKey.id == flagged.id).execute()
    rw_plain, _ = world.key(org)
    token_path = f"{TOKENS}/{new_uuid()}"
    cases = [
        (ro_capable, "write_access_required"),
        (ro_plain, "write_access_required"),
        (ro_project, "write_access_required"),
        (rw_project, "org_scope_required"),
        (rw_project_flagged, "org_scope_required"),
        (rw_plain, "server_registration_not_enabled"),
    ]
    for raw, code in cases:
        # Refused before the body is looked at: an invalid body changes nothing.
        for body in ({}, {"expires_in": "never", "bogus": 1}):
            r = client.post(TOKENS, headers=auth(raw), json=body)
            assert (r.status_code, r.json["error"]) == (403, code), (code, body)
        r = client.delete(token_path, headers=auth(raw))
        assert (r.status_code, r.json["error"]) == (403, code), code
    assert RegistrationToken.select().count() == 0


def test_a_key_is_needed_first(client):
    for method in (client.get, client.post):
        r = method(TOKENS, json={"bogus": 1} if method == client.post else None)
        assert r.status_code == 401 and r.json["error"] == "missing_api_key"
    r = client.delete(f"{TOKENS}/{new_uuid()}")
    assert r.status_code == 401 and r.json["error"] == "missing_api_key"


def test_list_needs_org_scope_and_the_capability(client, world, org_rw):
    org, raw = org_rw
    project = world.project(org)
    create(client, raw)
    ro_capable, _ = world.key(org, "read_only", server_registration=True)
    ro_plain, _ = world.key(org, "read_only")
    rw_project, _ = world.key(org, scope="project", project=project)
    rw_plain, _ = world.key(org)
    assert len(listing(client, ro_capable)) == 1  # listing is a read
    for key, code in ((ro_plain, "server_registration_not_enabled"),
                      (rw_project, "org_scope_required"),
                      (rw_plain, "server_registration_not_enabled")):
        r = client.get(TOKENS, headers=auth(key))
        assert (r.status_code, r.json["error"]) == (403, code)


def test_capability_switched_on_and_off(client, world):
    org = world.org()
    raw, key = world.key(org)
    assert client.post(TOKENS, headers=auth(raw), json={}).status_code == 403
    ApiKey.update(server_registration=True).where(ApiKey.id == key.id).execute()
    assert client.post(TOKENS, headers=auth(raw), json={}).status_code == 201
    ApiKey.update(server_registration=False).where(ApiKey.id == key.id).execute()
    r = client.post(TOKENS, headers=auth(raw), json={})
    assert r.status_code == 403 and r.json["error"] == "server_registration_not_enabled"
    assert RegistrationToken.select().count() == 1


def test_service_checks_access_without_the_request_hooks(world):
    org = world.org()
    _, read_only = world.key(org, "read_only", server_registration=True)
    with pytest.raises(ApiError) as exc:
        registration.create_token(read_only)
    assert exc.value.code == "write_access_required"
    with pytest.raises(ApiError) as exc:
        registration.revoke_token(read_only, uuid.uuid4())
    assert exc.value.code == "write_access_required"


# --- list and statuses ------------------------------------------------------------

def test_list_statuses_newest_first_never_the_token(client, world, org_rw, fake_clock):
    org, raw = org_rw
    org.server_quota = 10
    org.save()
    made = {}
    for name, expires_in in (("to-consume", "7d"), ("to-revoke", "7d"), ("to-expire", "1h"),
                             ("stays", "7d")):
        made[name] = create(client, raw, server_name=name, expires_in=expires_in)
        fake_clock.advance(seconds=1)
    registration.consume_token(made["to-consume"]["token"], **FACTS)
    assert client.delete(f"{TOKENS}/{made['to-revoke']['token_id']}",
                         headers=auth(raw)).status_code == 204
    fake_clock.advance(hours=1)

    r = client.get(TOKENS, headers=auth(raw))
    entries = r.json
    assert [e["server_name"] for e in entries] == ["stays", "to-expire", "to-revoke", "to-consume"]
    assert {e["server_name"]: e["status"] for e in entries} == {
        "stays": "pending", "to-expire": "expired", "to-revoke": "revoked",
        "to-consume": "consumed"}
    for entry in entries:
        assert set(entry) == LISTED_KEYS
        full = made[entry["server_name"]]
        assert entry["token_id"] == full["token_id"]
        assert entry["token_prefix"] == full["token"][:17] and entry["token_prefix"].startswith("srt_live_")
        assert entry["expires_at"] == full["expires_at"] and entry["created_at"].endswith("Z")
        assert full["token"] not in r.get_data(as_text=True)
    # The stored status of an expired token is still pending: expiry is derived.
    assert RegistrationToken.get_by_id(made["to-expire"]["token_id"]).status == "pending"


def test_list_shows_only_the_organizations_tokens(client, world, org_rw):
    _, raw = org_rw
    other_raw, _ = world.key(world.org(), server_registration=True)
    mine = create(client, raw)
    create(client, other_raw)
    assert [e["token_id"] for e in listing(client, raw)] == [mine["token_id"]]
    assert listing(client, world.key(world.org(), server_registration=True)[0]) == []


# --- quota ------------------------------------------------------------------------

def test_pending_tokens_fill_the_quota_and_revoking_frees_a_slot(client, org_rw):
    _, raw = org_rw  # quota 3
    tokens = [create(client, raw) for _ in range(3)]
    r = client.post(TOKENS, headers=auth(raw), json={})
    assert r.status_code == 409 and r.json["error"] == "server_quota_exceeded"
    assert RegistrationToken.select().count() == 3
    assert client.delete(f"{TOKENS}/{tokens[0]['token_id']}", headers=auth(raw)).status_code == 204
    create(client, raw)
    assert client.post(TOKENS, headers=auth(raw), json={}).status_code == 409


def test_expired_tokens_do_not_count(client, org_rw, fake_clock):
    _, raw = org_rw
    for _ in range(3):
        create(client, raw, expires_in="1h")
    assert client.post(TOKENS, headers=auth(raw), json={}).status_code == 409
    fake_clock.advance(hours=1)
    create(client, raw)


def test_servers_count_only_live_own_ones(client, world, org_rw):
    org, raw = org_rw
    servers = [world.server(org), world.server(org)]
    world.server(None)  # shared
    world.server(world.org())  # someone else's
    create(client, raw)
    r = client.post(TOKENS, headers=auth(raw), json={})
    assert r.status_code == 409 and r.json["error"] == "server_quota_exceeded"
    Server.update(deleted_at=servers[0].created_at).where(Server.id == servers[0].id).execute()
    create(client, raw)


def test_zero_quota(client, world):
    org = world.org(quota=0)
    raw, _ = world.key(org, server_registration=True)
    r = client.post(TOKENS, headers=auth(raw), json={})
    assert r.status_code == 409 and r.json["error"] == "server_quota_exceeded"


def test_concurrent_creations_never_exceed_the_quota(world):
    org = world.org(quota=2)
    _, key = world.key(org, server_registration=True)
    outcomes = run_together(6, lambda: registration.create_token(key))
    assert sorted(type(o).__name__ for o in outcomes).count("tuple") == 2
    assert {o.code for o in outcomes if isinstance(o, ApiError)} == {"server_quota_exceeded"}
    assert RegistrationToken.select().count() == 2


# --- revoke -----------------------------------------------------------------------

def test_revoke_is_idempotent_for_revoked_and_expired(client, org_rw, fake_clock):
    _, raw = org_rw
    token = create(client, raw)
    path = f"{TOKENS}/{token['token_id']}"
    r = client.delete(path, headers=auth(raw))
    assert r.status_code == 204 and r.data == b""
    row = RegistrationToken.get_by_id(token["token_id"])
    assert row.status == "revoked" and row.revoked_at == fake_clock.now
    fake_clock.advance(seconds=5)
    assert client.delete(path, headers=auth(raw)).status_code == 204
    assert RegistrationToken.get_by_id(token["token_id"]).revoked_at == row.revoked_at

    expiring = create(client, raw, expires_in="1h")
    fake_clock.advance(hours=2)
    assert client.delete(f"{TOKENS}/{expiring['token_id']}", headers=auth(raw)).status_code == 204
    [entry] = [e for e in listing(client, raw) if e["token_id"] == expiring["token_id"]]
    assert entry["status"] == "expired"


def test_revoke_404s(client, world, org_rw):
    _, raw = org_rw
    other_raw, _ = world.key(world.org(), server_registration=True)
    theirs = create(client, other_raw)
    consumed = create(client, raw)
    registration.consume_token(consumed["token"], **FACTS)
    for path in (f"{TOKENS}/{new_uuid()}", f"{TOKENS}/{theirs['token_id']}",
                 f"{TOKENS}/{consumed['token_id']}", f"{TOKENS}/not-a-uuid"):
        r = client.delete(path, headers=auth(raw))
        assert r.status_code == 404 and r.json["error"] == "not_found", path
    assert RegistrationToken.get_by_id(theirs["token_id"]).status == "pending"
    assert RegistrationToken.get_by_id(consumed["token_id"]).status == "consumed"


# --- consume (the agent's Register call) ---------------------------------------------

def test_consume_creates_the_server_and_takes_over_the_slot(client, world, org_rw, fake_clock):
    org, raw = org_rw  # quota 3
    named = create(client, raw, server_name="db-1")
    unnamed = create(client, raw)
    create(client, raw)

    server, credential = registration.consume_token(named["token"], **FACTS)
    assert (server.name, server.provider, server.organization_id) == ("db-1", "byos", org.id)
    assert (server.cpu_cores, server.ram_mb, server.disk_gb, server.hostname) == (
        4, 7961, 78, "box-1.example.net")
    assert credential.startswith("agt_live_") and len(credential) == len("agt_live_") + 40
    stored = Server.get_by_id(server.id)
    assert stored.agent_credential_hash == security.digest(credential)
    assert agents.server_for_credential(credential).id == server.id
    for values in stored_rows("server"):
        assert all(credential not in str(v) for v in values)
    token = RegistrationToken.get_by_id(named["token_id"])
    assert (token.status, token.server_id, token.consumed_at) == ("consumed", server.id, fake_clock.now)

    # The slot moved from the token to the server: still full.
    r = client.post(TOKENS, headers=auth(raw), json={})
    assert r.status_code == 409 and r.json["error"] == "server_quota_exceeded"

    # Without a server_name on the token, the server is named after its host.
    other, _ = registration.consume_token(unnamed["token"], **{**FACTS, "hostname": "box-2"})
    assert other.name == "box-2"

    listed = client.get(f"{P}/servers", headers=auth(raw)).json["data"]
    assert {s["name"]: s for s in listed}["db-1"] == {
        "id": str(server.id), "name": "db-1", "provider": "byos", "region": None,
        "cpu_cores": 4, "ram_mb": 7961, "disk_gb": 78, "environment_count": 0,
        "connected": False, "last_seen_at": None, "connection": "agent", "reachable": False,
        "unreachable_since": None, "agent_version": None, "agent_behind": None,
        "ssh": None}  # not yet connected
    assert {s["name"] for s in listed} == {"db-1", "box-2"}


def test_consume_name_precedence(client, org_rw):
    _, raw = org_rw
    plain = create(client, raw)
    server, _ = registration.consume_token(plain["token"], server_name="  agent-side  ", **FACTS)
    assert server.name == "agent-side"
    named = create(client, raw, server_name="from-token")
    server, _ = registration.consume_token(named["token"], server_name="agent-side", **FACTS)
    assert server.name == "from-token"


@pytest.mark.parametrize("case, code, status", [
    ("forged", "token_invalid", 401),
    ("not_a_token", "token_invalid", 401),
    ("empty", "token_invalid", 401),
    ("expired", "token_expired", 401),
    ("revoked", "token_revoked", 401),
    ("consumed", "token_consumed", 409),
])
def test_consume_refusals(client, org_rw, fake_clock, case, code, status):
    _, raw = org_rw
    token = create(client, raw, expires_in="1h")
    presented = token["token"]
    if case == "forged":
        presented = "srt_live_" + "x" * 40
    elif case == "not_a_token":
        presented = "svc_live_rw_" + token["token"][9:]
    elif case == "empty":
        presented = ""
    elif case == "expired":
        fake_clock.advance(hours=1)
    elif case == "revoked":
        assert client.delete(f"{TOKENS}/{token['token_id']}", headers=auth(raw)).status_code == 204
    elif case == "consumed":
        registration.consume_token(presented, **FACTS)
    servers_before = Server.select().count()
    with pytest.raises(ApiError) as exc:
        registration.consume_token(presented, **FACTS)
    assert (exc.value.code, exc.value.status) == (code, status)
    assert Server.select().count() == servers_before
    if case in ("forged", "not_a_token", "empty"):
        assert RegistrationToken.get_by_id(token["token_id"]).status == "pending"


@pytest.mark.parametrize("facts", [
    {"hostname": ""}, {"hostname": "   "}, {"cpu_cores": 0}, {"ram_mb": -1},
    {"disk_gb": 2**31}, {"cpu_cores": "4"}, {"server_name": "n" * 256},
])
def test_bad_facts_do_not_burn_the_token(client, org_rw, facts):
    _, raw = org_rw
    token = create(client, raw)
    with pytest.raises(ApiError) as exc:
        registration.consume_token(token["token"], **{**FACTS, **facts})
    assert exc.value.code == "invalid_facts"
    assert RegistrationToken.get_by_id(token["token_id"]).status == "pending"
    assert Server.select().count() == 0
    registration.consume_token(token["token"], **FACTS)  # still usable


def run_together(n, work):
    """Run `work` in n threads released at once; returns each result or ApiError."""
    barrier = threading.Barrier(n)
    outcomes = [None] * n

    def run(i):
        try:
            barrier.wait()
            outcomes[i] = work()
        except ApiError as exc:
            outcomes[i] = exc
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcomes[i] = exc
        finally:
            database.close()  # this thread's own connection

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    unexpected = [o for o in outcomes if isinstance(o, Exception) and not isinstance(o, ApiError)]
    assert not unexpected, unexpected
    return outcomes


def test_racing_agents_get_exactly_one_server(client, org_rw):
    org, raw = org_rw
    for _ in range(3):
        token = create(client, raw)
        outcomes = run_together(4, lambda t=token: registration.consume_token(t["token"], **FACTS))
        winners = [o for o in outcomes if not isinstance(o, ApiError)]
        assert len(winners) == 1
        assert {o.code for o in outcomes if isinstance(o, ApiError)} == {"token_consumed"}
        row = RegistrationToken.get_by_id(token["token_id"])
        assert row.status == "consumed" and row.server_id == winners[0][0].id
    assert Server.select().where(Server.organization == org.id).count() == 3
