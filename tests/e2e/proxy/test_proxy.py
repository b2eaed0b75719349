"""An environment's URL over HTTPS, end to end: the real gateway, a real
`berth-agent run`, real containers, the agent's proxy (Caddy) and a real ACME
server (pebble) that validates through the loopback DNS server. One
environment is deployed and answers at its platform URL with a certificate
pebble issued, websocket upgrade included; a custom domain fails verification,
is published and verified, answers too, and is removed; the proxy container
is removed behind the agent's back and comes back with its routes; stopping
the environment answers 503 and starting it answers again; a destroy removes
its route."""

import json
import subprocess

import pytest

from control_plane.models import Server
from control_plane.services import agents as agent_svc
from control_plane.services.accounts import orgs
from tests.conftest import auth
from tests.support.agents import AGENT, registered_server, wait_for
from tests.support.proxy import APPS_DOMAIN, https_request, wait_https, websocket_hello

P, V1 = "/api/public/v1", "/api/v1"
CUSTOM = "erp.shop-berth-test.com"


class Flow:
    pass


@pytest.fixture
def flow(app, world, proxied, agents, gateway, http_app, tmp_path, pebble, docker_client):
    # `proxied` before `agents`: the agent stops before the proxy is removed (else its
    # watch would start the proxy again).
    f = Flow()
    f.root, f.data = tmp_path / "srv", tmp_path / "agent-data"
    f.org = world.org()
    f.server, credential = registered_server(f.org)
    f.project = world.project(f.org, f.server)
    f.key = auth(world.key(f.org)[0])
    user = world.user(f.org, permissions=("project.environments.deploy",))
    f.user = auth(orgs.issue_user_token(user.id))
    f.agent = agents(f.server, credential, env={"BERTH_AGENT_ENV_ROOT": str(f.root), **proxied})
    wait_for(lambda: str(f.server.id) in gateway.sessions
             and agent_svc.is_connected(Server.get_by_id(f.server.id)), timeout=30,
             what="agent connected")
    f.port, f.pebble = pebble.tls_port, pebble
    f.created = []
    yield f
    from agent.deploy.environments import Environments
    for env_id in f.created:
        Environments(docker_client, root=f.root).destroy(env_id, True, lambda *a: None)


def _settled(client, f, deployment_id):
    d = wait_for(lambda: (d := client.get(f"{V1}/deployments/{deployment_id}",
                                          headers=f.user).json)["status"]
                 in ("success", "failed", "cancelled", "destroyed") and d,
                 timeout=180, interval=0.3, what=f"deployment {deployment_id} settled")
    assert d["status"] in ("success", "destroyed"), d["error_message"]
    return d


def _url_host(client, f, env_id):
    url = client.get(f"{P}/environments/{env_id}", headers=f.key).json["url"]
    assert url.startswith("https://")
    return url.removeprefix("https://")


def test_environment_answers_over_https_at_its_urls(client, flow, loopback_dns, docker_client,
                                                    proxy_image, tmp_path):
    f = flow
    # A proxy left running by an earlier installation (another state directory) is
    # replaced, not talked to.
    (tmp_path / "other").mkdir()
    docker_client.containers.run(proxy_image, name="berth-proxy", command=["sleep", "600"],
                                 detach=True, network_mode="host", labels={"berth.role": "proxy"},
                                 volumes={str(tmp_path / "other"): {"bind": "/berth-proxy"}})
    env_id = client.post(f"{P}/projects/{f.project.id}/environments", headers=f.key,
                         json={"name": "Production"}).json["id"]
    f.created.append(env_id)
    host = _url_host(client, f, env_id)
    assert host == f"{env_id.replace('-', '')[:12]}.{APPS_DOMAIN}"
    loopback_dns.a(host)  # the platform's wildcard record, as DNS would have it
    first = client.get(f"{V1}/deployments?project_id={f.project.id}", headers=f.user).json
    _settled(client, f, first["data"][0]["id"])

    roots = f.pebble.issuing_roots()
    status, headers, body = wait_https(host, f.port, roots)
    assert status == 200 and json.loads(body) == {"status": "pass"}
    _, _, info = https_request(host, f.port, "/berth/info", roots)
    seen = json.loads(info)["request"]  # proxy_mode: the ERP sees the visitor's scheme and host
    assert (seen["scheme"], seen["host"]) == ("https", f"{host}:{f.port}")
    assert websocket_hello(host, f.port, roots) == ("HTTP/1.1 101 Switching Protocols",
                                                    '{"port": 8069}')
    # The status snapshot and `berth-agent status` show the proxy and the certificate.
    snapshot = wait_for(lambda: (s := client.get(f"{P}/environments/{env_id}/status",
                                                 headers=f.key).json)["certificates"]
                        and s["certificates"][0]["state"] == "valid" and s,
                        timeout=30, interval=0.5, what="the certificate reported valid")
    assert snapshot["proxy"]["running"] is True and snapshot["proxy"]["reason"] is None
    assert snapshot["certificates"][0]["hostname"] == host
    assert snapshot["certificates"][0]["valid_until"] > "2026-11"
    shown = subprocess.run([AGENT, "status"], env=f.agent.env, capture_output=True, text=True,
                           timeout=30).stdout
    assert "proxy:          running" in shown
    assert f"  {host}: certificate valid until " in shown
    mounts = docker_client.containers.get("berth-proxy").attrs["Mounts"]
    assert [m["Source"] for m in mounts] == [str(f.agent.dir / "data" / "proxy")]
    # The ERP itself publishes nothing on the server.
    erp = docker_client.containers.get(f"berth-{env_id.replace('-', '')[:12]}-erp")
    assert not any(erp.attrs["NetworkSettings"]["Ports"].values())

    # With workers the ERP serves /websocket on its long-polling port: the proxy follows.
    r = client.patch(f"{V1}/environments/{env_id}/config", headers=f.user,
                     json={"erp_options": {"workers": 2}})
    _settled(client, f, r.json["deployment"]["id"])
    assert websocket_hello(host, f.port, roots) == ("HTTP/1.1 101 Switching Protocols",
                                                    '{"port": 8072}')

    # A custom domain: refused until DNS shows the record, then routed and certified.
    domains = f"{V1}/environments/{env_id}/domains"
    added = client.post(domains, headers=f.user, json={"domain": CUSTOM}).json
    r = client.post(f"{domains}/{CUSTOM}/verify", headers=f.user)
    assert r.status_code == 409 and r.json["error"] == "domain_not_verified"
    with pytest.raises(OSError):
        https_request(CUSTOM, f.port, "/web/health", roots, timeout=5)  # not routed: no cert
    loopback_dns.txt(added["verification"]["txt"]["name"], added["verification"]["txt"]["value"])
    loopback_dns.a(CUSTOM)
    assert client.post(f"{domains}/{CUSTOM}/verify", headers=f.user).json["status"] == "verified"
    assert _url_host(client, f, env_id) == CUSTOM
    status, _, _ = wait_https(CUSTOM, f.port, roots)
    assert status == 200
    assert https_request(host, f.port, "/web/health", roots)[0] == 200  # both names

    # The proxy is removed behind the agent's back: it comes back with every route.
    docker_client.containers.get("berth-proxy").remove(force=True)
    wait_for(lambda: _answers(CUSTOM, f.port, roots), timeout=60, interval=0.5,
             what="the proxy back with its routes")
    assert _answers(host, f.port, roots)

    # Stopped: the name answers 503 (not someone else's site); started: 200 again.
    r = client.post(f"{P}/environments/{env_id}/actions/stop", headers=f.key)
    assert r.status_code in (200, 202), r.json
    wait_for(lambda: https_request(host, f.port, "/web/health", roots)[0] == 503, timeout=60,
             interval=0.5, what="503 while stopped")
    assert https_request(host, f.port, "/", roots)[1].get("Retry-After") == "30"
    r = client.post(f"{P}/environments/{env_id}/actions/start", headers=f.key)
    assert r.status_code in (200, 202), r.json
    wait_for(lambda: _answers(host, f.port, roots), timeout=60, interval=0.5,
             what="answers again once started")

    # Removing the domain unroutes it; destroying the environment unroutes the rest.
    assert client.delete(f"{domains}/{CUSTOM}", headers=f.user).status_code == 204
    assert _url_host(client, f, env_id) == host
    wait_for(lambda: not _answers(CUSTOM, f.port, roots), timeout=30, interval=0.5,
             what="the removed domain unrouted")
    r = client.delete(f"{V1}/deployments/environment/{env_id}/destroy", headers=f.user)
    assert r.status_code == 200, r.json
    f.created.remove(env_id)
    wait_for(lambda: not _answers(host, f.port, roots), timeout=30, interval=0.5,
             what="the destroyed environment unrouted")


def _answers(name, port, roots):
    try:
        return https_request(name, port, "/web/health", roots, timeout=5)[0] == 200
    except OSError:
        return False


@pytest.mark.backends("sqlite")  # the agent's proxy; the deploy above runs on both databases
def test_acme_server_unreachable_environment_runs_and_status_says_why(
        client, app, flow, loopback_dns, pebble):
    """The ACME directory is cut off (a TCP proxy in front of pebble): the
    deployment still succeeds and the ERP runs; `berth-agent status` shows the
    proxy up and the certificate failing with the reason. Once the directory is
    back, the agent's retries (with backoff) get the certificate."""
    from tests.support.tcp_proxy import TcpProxy

    f = flow
    cut = TcpProxy(int(pebble.directory.split(":")[2].split("/")[0]))
    try:
        cut.trip(0, "cut")
        for settings in (app.extensions["berth"].settings, app.config):
            settings["ACME_DIRECTORY_URL"] = f"https://127.0.0.1:{cut.port}/dir"
        env_id = client.post(f"{P}/projects/{f.project.id}/environments", headers=f.key,
                             json={"name": "Offline"}).json["id"]
        f.created.append(env_id)
        host = _url_host(client, f, env_id)
        loopback_dns.a(host)
        first = client.get(f"{V1}/deployments?project_id={f.project.id}", headers=f.user).json
        _settled(client, f, first["data"][0]["id"])
        assert client.get(f"{P}/environments/{env_id}", headers=f.key).json["status"] == "running"

        def certificate():
            proxy = f.agent.status()[1].get("proxy") or {}
            return proxy.get("running"), (proxy.get("certificates") or {}).get(host) or {}
        running, cert = wait_for(lambda: (c := certificate())[1].get("state") == "failing" and c,
                                 timeout=60, interval=0.5, what="the certificate failing")
        assert running is True
        assert "127.0.0.1" in cert["reason"] or "connect" in cert["reason"], cert

        cut.heal()
        roots = pebble.issuing_roots()
        status, _, _ = wait_https(host, f.port, roots, timeout=120)
        assert status == 200
        wait_for(lambda: certificate()[1].get("state") == "valid", timeout=30, interval=0.5,
                 what="the certificate valid")
        assert certificate()[1]["valid_until"] > "2026"
    finally:
        cut.close()


@pytest.mark.backends("sqlite")  # the agent's proxy; the deploy above runs on both databases
def test_proxy_port_held_fails_the_deploy_readably_and_a_retry_works(client, flow, loopback_dns,
                                                                     pebble, docker_client):
    """Another process holds the HTTPS port the proxy needs: the deployment fails
    saying so (nothing half-started is left), and its retry works once the port
    is free."""
    import socket

    f = flow
    holder = socket.create_server(("127.0.0.1", f.port))
    try:
        env_id = client.post(f"{P}/projects/{f.project.id}/environments", headers=f.key,
                             json={"name": "Clash"}).json["id"]
        f.created.append(env_id)
        first = client.get(f"{V1}/deployments?project_id={f.project.id}", headers=f.user).json
        d = wait_for(lambda: (d := client.get(f"{V1}/deployments/{first['data'][0]['id']}",
                                              headers=f.user).json)["status"] == "failed" and d,
                     timeout=120, interval=0.3, what="the deployment failed")
        assert "address already in use" in d["error_message"], d["error_message"]
        assert f"127.0.0.1:{f.port}" in d["error_message"]
    finally:
        holder.close()
    retry = client.post(f"{V1}/deployments/{d['id']}/retry", headers=f.user)
    assert retry.status_code == 201, retry.json
    _settled(client, f, retry.json["id"])
    host = _url_host(client, f, env_id)
    loopback_dns.a(host)
    try:
        answer = wait_https(host, f.port, pebble.issuing_roots(), running=True)
    except AssertionError as exc:  # what the environment and its containers were doing
        raise AssertionError(f"{exc}\n{_situation(client, f, env_id, docker_client)}") from None
    assert answer[0] == 200


def _situation(client, f, env_id, docker_client):
    lines = client.get(f"{P}/environments/{env_id}/logs?lines=200", headers=f.key).json
    erp = client.get(f"{P}/environments/{env_id}/runtime-logs?lines=50", headers=f.key).json
    db = client.get(f"{P}/environments/{env_id}/runtime-logs?source=postgres&lines=50",
                    headers=f.key).json
    containers = [(c.name, c.status, c.attrs["RestartCount"], c.attrs["State"].get("StartedAt"))
                  for c in docker_client.containers.list(
                      all=True, filters={"label": f"berth.environment_id={env_id}"})]
    return json.dumps({"task_log": lines, "erp": erp, "postgres": db,
                       "containers": containers}, indent=1, default=str)


@pytest.mark.backends("sqlite")  # the agent's check and proxy; the deploy runs on both above
def test_a_websocket_route_that_does_not_reach_the_erp_fails_the_deploy_and_reverts(
        client, flow, loopback_dns, docker_client):
    """Workers on, and the proxy cannot reach the ERP's long-polling port (a rule
    rejects it, as a firewall or a proxy without the route would): the deploy
    answers its health check, fails the websocket check through the proxy and
    reverts; the route goes back to the previous ERP. `warn` lets it stand."""
    f = flow
    env_id = client.post(f"{P}/projects/{f.project.id}/environments", headers=f.key,
                         json={"name": "Realtime"}).json["id"]
    f.created.append(env_id)
    host = _url_host(client, f, env_id)
    loopback_dns.a(host)
    first = client.get(f"{V1}/deployments?project_id={f.project.id}", headers=f.user).json
    _settled(client, f, first["data"][0]["id"])
    roots = f.pebble.issuing_roots()
    assert wait_https(host, f.port, roots)[0] == 200
    short = env_id.replace("-", "")[:12]
    previous = docker_client.containers.get(f"berth-{short}-erp").id
    subnet = docker_client.networks.get(f"berth-{short}").attrs["IPAM"]["Config"][0]["Subnet"]
    rule = ["OUTPUT", "-d", subnet, "-p", "tcp", "--dport", "8072", "-j", "REJECT",
            "--reject-with", "tcp-reset"]
    subprocess.run(["iptables", "-I", *rule], check=True)
    try:
        r = client.patch(f"{V1}/environments/{env_id}/config", headers=f.user,
                         json={"erp_options": {"workers": 2}})
        done = _ended(client, f, r.json["deployment"]["id"])
        assert done["status"] == "failed", done
        assert "the post-deploy checks failed (websocket: " \
               f"https://{host}/websocket through the proxy answered 502" in done["error_message"]
        seen = {c["name"]: c["status"] for c in done["extra_data"]["checks"]}
        assert seen["websocket"] == "failed"
        erp = docker_client.containers.get(f"berth-{short}-erp")
        assert (erp.id, erp.status) == (previous, "running")
        # The previous ERP's route, without workers: /websocket on its HTTP port.
        assert websocket_hello(host, f.port, roots) == ("HTTP/1.1 101 Switching Protocols",
                                                        '{"port": 8069}')

        r = client.patch(f"{V1}/projects/{f.project.id}/environments/{env_id}",
                         headers=f.user, json={"post_deploy_checks": "warn"})
        assert r.status_code == 200, r.json
        r = client.post(f"{V1}/environments/{env_id}/deploy", headers=f.user,
                        json={"force": True})
        done = _ended(client, f, r.json["deployment"]["id"])
        assert done["status"] == "success", done
        assert {c["name"]: c["status"] for c in done["extra_data"]["checks"]}["websocket"] == \
            "failed"
    finally:
        subprocess.run(["iptables", "-D", *rule], check=True)
    # The route reaches the long-polling port again: the check passes.
    r = client.post(f"{V1}/environments/{env_id}/deploy", headers=f.user, json={"force": True})
    done = _settled(client, f, r.json["deployment"]["id"])
    checks = {c["name"]: c for c in done["extra_data"]["checks"]}
    assert checks["websocket"]["status"] == "passed", checks
    assert checks["websocket"]["detail"] == \
        f"WebSocket handshake on https://{host}/websocket through the proxy"
    assert websocket_hello(host, f.port, roots) == ("HTTP/1.1 101 Switching Protocols",
                                                    '{"port": 8072}')


def _ended(client, f, deployment_id):
    return wait_for(lambda: (d := client.get(f"{V1}/deployments/{deployment_id}",
                                             headers=f.user).json)["status"]
                    in ("success", "failed", "cancelled") and d,
                    timeout=180, interval=0.3, what=f"deployment {deployment_id} ended")
