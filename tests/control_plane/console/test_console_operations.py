"""The day-to-day operations the console does through the APIs' services, on both
databases: a project edited and deleted, an environment renamed and moved to
another branch, a server reached over SSH added and a new host key accepted, a
webhook edited, tested, its deliveries' bodies and answers read and one sent again
to a real HTTPS receiver."""

import html
import json
import re
import subprocess

from control_plane.models import (
    Backup,
    CustomDomain,
    Deployment,
    Environment,
    Project,
    Server,
    WebhookDelivery,
)
from control_plane.services.servers import ssh as ssh_svc
from control_plane.services.tasks import engine
from control_plane.services.webhooks import delivery
from tests.conftest import new_uuid
from tests.control_plane.console.test_console import PASSWORD
from tests.control_plane.console.test_console_pages import _text, member, receiver  # noqa: F401
from tests.control_plane.webhooks.test_delivery import event, hook
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures


def test_a_project_is_edited_and_a_blank_field_keeps_its_value(world, member):  # noqa: F811
    org, b = member
    project = world.project(org)
    r = b.post(f"/projects/{project.id}/edit", {"name": "  Acme ERP ", "default_branch": "17.0",
                                                "git_repo_url": ""})
    assert r.status_code == 303
    assert "The project is saved" in _text(b.get(r.headers["Location"]))
    stored = Project.get_by_id(project.id)
    assert (stored.name, stored.default_branch, stored.git_repo_url) == (
        "Acme ERP", "17.0", project.git_repo_url)
    r = b.post(f"/projects/{project.id}/edit", {"default_branch": "x" * 256})
    assert r.status_code == 422 and "default_branch" in _text(r)
    assert Project.get_by_id(project.id).default_branch == "17.0"


def test_deleting_a_project_asks_for_its_name_and_is_refused_while_one_runs(world, member):  # noqa: F811
    org, b = member
    project = world.project(org)
    running = world.environment(project)  # running
    r = b.post(f"/projects/{project.id}/delete")
    assert r.status_code == 200 and "cannot be undone" in _text(r)
    assert b.post(f"/projects/{project.id}/delete",
                  {"confirmed": "1", "confirm_name": "other"}).status_code == 422
    r = b.post(f"/projects/{project.id}/delete", {"confirmed": "1", "confirm_name": project.name})
    assert r.status_code == 409 and "stop them first" in _text(r)
    assert Project.get_by_id(project.id).deleted_at is None
    running.status = "stopped"
    running.save()
    r = b.post(f"/projects/{project.id}/delete", {"confirmed": "1", "confirm_name": project.name})
    assert r.status_code == 303 and r.headers["Location"].startswith("/projects?done=deleted")
    page = _text(b.get(r.headers["Location"]))
    assert "The project is deleted" in page and f">{project.name}</a>" not in page
    assert Project.get_by_id(project.id).deleted_at is not None
    assert Deployment.select().where(Deployment.environment == running.id,
                                     Deployment.kind == "delete").count() == 1


def test_an_environment_is_renamed_and_its_branch_changed_without_a_deploy(world, member):  # noqa: F811
    org, b = member
    env = world.environment(world.project(org))
    tasks = Deployment.select().where(Deployment.environment == env.id).count()
    r = b.post(f"/environments/{env.id}/edit", {"name": "staging-2", "branch": "feature/x"})
    assert r.status_code == 303 and r.headers["Location"].endswith("#settings-h")
    page = _text(b.get(r.headers["Location"]))
    assert "<h1>staging-2</h1>" in page and 'value="feature/x"' in page
    assert "A new branch is used from the next deploy" in page
    assert Deployment.select().where(Deployment.environment == env.id).count() == tasks
    r = b.post(f"/environments/{env.id}/edit", {"branch": "bad..name"})
    assert r.status_code == 422 and "branch" in _text(r)


def _status(page):
    """What the page says in its status lines, whitespace collapsed."""
    return " | ".join(" ".join(m.split()) for m in
                      re.findall(r'<p class="\w+" role="status">(.*?)</p>', page, re.S))


def _delivery_items(page):
    return re.findall(r"<li><details>.*?</details></li>", page, re.S)


def test_a_webhook_is_edited_tested_and_a_delivery_read_and_sent_again(app, world, member,  # noqa: F811
                                                                       receiver):  # noqa: F811
    org, b = member
    project = world.project(org)
    w, secret = hook(org, receiver.url + "/a")
    receiver.respond(500, then=200, path="/a")
    event(org, project)
    delivery.run(app.extensions["berth"])
    receiver.wait_for(1)
    page = _text(b.get(f"/webhooks/{w.id}"))
    [item] = _delivery_items(page)
    assert "retrying" in item and "HTTP 500" in item
    # The body sent, read when the row is opened: the event, never its signature.
    old = WebhookDelivery.get(WebhookDelivery.webhook == w.id)
    body_url = re.search(r'hx-get="([^"]+/body)"', item).group(1)
    sent = json.loads(_text(b.get(body_url)).split('<pre class="log">')[1].split("</pre>")[0]
                      .replace("&#34;", '"').replace("&quot;", '"'))
    assert sent["event"] == "deploy.completed" and sent["organization_id"] == str(org.id)
    assert "signature" not in _text(b.get(body_url)).lower()
    # Sent again: a new delivery of the same event, delivered; the old one stays.
    r = b.post(f"/webhooks/{w.id}/deliveries/{old.id}/redeliver")
    assert r.status_code == 303
    delivery.run(app.extensions["berth"])
    received = receiver.wait_for(2)
    assert len(received) == 2 and json.loads(received[1].body)["event_id"] == sent["event_id"]
    page = _text(b.get(r.headers["Location"]))
    assert "The event is sent again" in page
    items = _delivery_items(page)
    assert len(items) == 2 and "delivered" in items[0] and "HTTP 200" in items[0]
    # Edited: the URL, the events, the format; then a test ping that fails is said.
    r = b.post(f"/webhooks/{w.id}/edit", {"url": receiver.url + "/b",
                                           "events": ["deploy.failed", "backup.completed"],
                                           "format": "raw", "description": "ops"})
    assert r.status_code == 303
    page = _text(b.get(r.headers["Location"]))
    assert f"<h1>{receiver.url}/b</h1>" in page and "deploy.failed, backup.completed" in page
    receiver.respond(then=503, path="/b")
    said = _status(_text(b.post(f"/webhooks/{w.id}/test")))
    assert "The test ping failed: HTTP 503" in said, said
    receiver.respond(then=204, path="/b")
    said = _status(_text(b.post(f"/webhooks/{w.id}/test")))
    assert re.search(r"The test ping was accepted: HTTP 204 in \d+ ms", said), said
    r = b.post(f"/webhooks/{w.id}/edit", {"url": "http://insecure.example.com/",
                                           "events": ["deploy.failed"]})
    assert r.status_code == 422
    assert WebhookDelivery.select().where(WebhookDelivery.webhook == w.id).count() == 2


def _host_key(tmp_path, name):
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return (tmp_path / f"{name}.pub").read_text().strip()


def test_an_ssh_server_is_added_and_a_new_host_key_accepted_once_checked(
        app, world, member, tmp_path):  # noqa: F811
    """The page's part only: the connections and their host key checks run against a
    real sshd in tests/e2e/servers/test_ssh_servers.py; here the checker's finding (a
    different key offered) is written as it records it."""
    app.extensions["berth"].ssh = None  # no SSH link: nothing is dialled
    org, b = member
    r = b.post("/servers/ssh", {"name": "db-box", "ssh_host": "203.0.113.7", "ssh_port": "",
                                "ssh_username": "deploy"})
    page = _text(r)
    assert r.status_code == 201, page
    public, _ = ssh_svc.org_key(org.id)
    assert f'<pre id="public-key" class="copyable">{public}</pre>' in page
    assert "~deploy/.ssh/authorized_keys" in page and "first contact is pinned" in page
    server = Server.get(Server.name == "db-box")
    assert (server.connection, server.ssh_port, server.ssh_host_key) == ("ssh", 22, None)
    r = b.post("/servers/ssh", {"name": "bad", "ssh_host": "203.0.113.8", "ssh_port": "70000"})
    assert r.status_code == 422 and "ssh_port" in _text(r)
    r = b.post("/servers/ssh", {"name": "bad", "ssh_host": "203.0.113.8",
                                "ssh_host_key": "not a key"})
    assert r.status_code == 422 and "OpenSSH public key line" in html.unescape(_text(r))
    assert not Server.select().where(Server.name == "bad").exists()

    pinned, offered = _host_key(tmp_path, "a"), _host_key(tmp_path, "b")
    Server.update(ssh_host_key=ssh_svc.host_key_line(pinned),
                  ssh_offered_host_key=ssh_svc.host_key_line(offered)).where(
        Server.id == server.id).execute()
    page = _text(b.get(f"/servers/{server.id}"))
    assert "The server offers another host key</strong>, " + ssh_svc.fingerprint(offered) in page
    assert ssh_svc.fingerprint(pinned) in page
    r = b.post(f"/servers/{server.id}/accept-host-key")
    assert r.status_code == 200 and "ssh-keygen -lf" in _text(r)
    assert Server.get_by_id(server.id).ssh_offered_host_key is not None  # only asked
    r = b.post(f"/servers/{server.id}/accept-host-key", {"confirmed": "1"})
    assert r.status_code == 303
    page = _text(b.get(r.headers["Location"]))
    assert "The new host key is accepted" in page and "offers another host key" not in page
    stored = Server.get_by_id(server.id)
    assert (stored.ssh_host_key, stored.ssh_offered_host_key) == (
        ssh_svc.host_key_line(offered), None)
    assert b.post(f"/servers/{server.id}/accept-host-key",
                  {"confirmed": "1"}).status_code == 409  # nothing offered now


def test_the_audit_log_is_filtered_by_a_family_of_actions(world, member):  # noqa: F811
    org, b = member
    project = world.project(org)
    b.post(f"/projects/{project.id}/edit", {"name": "renamed"})
    env = world.environment(project)
    b.post(f"/environments/{env.id}/edit", {"branch": "next"})
    page = _text(b.get("/audit"))
    picker = re.search(r'<select id="f-action".*?</select>', page, re.S).group(0)
    options = re.findall(r"<option[^>]*>([^<]+)</option>", picker)
    assert options.index("project.*") + 1 == options.index("project.update")
    listed = _text(b.get("/audit?action=project.*"))
    assert "<code>project.update</code>" in listed and "<code>environment.update</code>" \
        not in listed


def _field_error(page, field_id):
    found = re.search(rf'<span class="field-error" id="{field_id}-err">([^<]*)</span>', page)
    return found and html.unescape(found.group(1))


def test_a_refused_form_comes_back_with_its_words_beside_each_field(world, member):  # noqa: F811
    """The form's own page again (422), what was typed kept, each refusal beside its
    field in a person's words, the field marked for assistive technology; nothing
    made. From a page of another site, or none, the error page says it instead."""
    org, b = member
    project = world.project(org)
    page_url = f"/projects/{project.id}"
    r = b.post(f"/projects/{project.id}/environments",
               {"name": "shop-2", "ram_mb": "lots", "cpu_cores": "2"}, referer=page_url)
    page = _text(r)
    assert r.status_code == 422 and f"<h1>{project.name}</h1>" in page
    assert _field_error(page, "e-ram") == "Enter a whole number."
    assert ('id="e-ram" name="ram_mb" inputmode="numeric" value="lots" aria-invalid="true" '
            'aria-describedby="e-ram-err"') in page
    assert 'value="shop-2"' in page and _field_error(page, "e-name") is None
    assert "Not saved: 1 field to see to, marked below." in page
    # The page's other form is untouched: it shows the project's own values.
    assert f'id="p-name" name="name" maxlength="255" value="{project.name}">' in page
    assert _field_error(page, "p-name") is None
    assert not Environment.select().where(Environment.name == "shop-2").exists()
    # Posted from no page of this site: the error page says it.
    r = b.post(f"/projects/{project.id}/environments", {"name": "shop-2", "ram_mb": "lots"},
               referer="https://elsewhere.example/")
    assert r.status_code == 422 and "That was not done" in _text(r)
    # Posted from a page that cannot be shown now (gone meanwhile): the error page too.
    r = b.post(f"/projects/{project.id}/environments", {"name": "shop-2", "ram_mb": "lots"},
               referer=f"/environments/{new_uuid()}")
    assert r.status_code == 422 and "That was not done" in _text(r)
    # A webhook's events, none chosen: said beside them; the URL typed is kept.
    r = b.post("/webhooks", {"url": "https://hooks.example.com/x"}, referer="/webhooks")
    page = _text(r)
    assert r.status_code == 422 and _field_error(page, "w-events")
    assert 'value="https://hooks.example.com/x"' in page


def test_a_deployment_shows_its_commit_subject_author_and_time_and_the_page_what_runs(
        world, member, fake_clock):  # noqa: F811
    """The agent's result names the commit, its subject and author (an older agent's,
    the commit alone); the history shows them with how long the task took, and the
    page's head what the environment runs, where, and from which branch."""
    org, b = member
    env = world.environment(world.project(org))
    for name, said in (("old agent", {}), ("new agent", {"git_message": "Fix invoice totals",
                                                          "git_author": "Ada <script>"})):
        r = b.post(f"/environments/{env.id}/actions/redeploy", {"confirmed": "1"})
        assert r.status_code == 303, name
        task = Deployment.select().where(Deployment.environment == env.id).order_by(
            Deployment.created_at.desc()).first()
        engine.on_ack(task.id)
        fake_clock.advance(seconds=185)
        engine.on_result(task.id, True, {"git_commit": "ab" * 20, **said}, None)
        page = _text(b.get(f"/environments/{env.id}"))
        row = re.search(rf'<tr>(?:(?!</tr>).)*task={task.id}(?:(?!</tr>).)*</tr>', page,
                        re.S).group(0)
        assert '<td data-label="Took">3 min 5 s</td>' in row, row
        assert "<code>" + "ab" * 5 + "</code>" in row
        head = re.search(r'<p class="facts-line">(.*?)</p>', page, re.S).group(0)
        assert f"on <a href=\"/servers/{env.server_id}\">" in head and "branch main" in head
        if said:
            assert "Fix invoice totals · Ada &lt;script&gt;" in row
            assert "“Fix invoice totals” by Ada &lt;script&gt;" in head
        else:
            assert "<small>" not in row and "by" not in head.split("runs")[1]
    assert Deployment.get_by_id(task.id).extra_data["commit"] == {
        "message": "Fix invoice totals", "author": "Ada <script>"}


def test_a_key_or_a_domain_refused_is_said_beside_its_field(world, member):  # noqa: F811
    org, b = member
    r = b.post("/keys", {"name": "   ", "key_type": "read_only"}, referer="/keys")
    page = _text(r)
    assert r.status_code == 422 and "<h1>API keys</h1>" in page
    assert _field_error(page, "k-name") == "Give the key a name of 1 to 255 characters."
    r = b.post("/keys", {"name": "ci", "project_id": "nope"}, referer="/keys")
    page = _text(r)
    assert _field_error(page, "k-project") == \
        "Choose the whole organization or one of its projects."
    assert 'id="k-name" name="name" required maxlength="255" value="ci"' in page
    env = world.environment(world.project(org))
    r = b.post(f"/environments/{env.id}/domains", {"domain": "a" * 301},
               referer=f"/environments/{env.id}")
    page = _text(r)
    assert r.status_code == 422 and f"<h1>{env.name}</h1>" in page
    assert "between 1 and 300" in _field_error(page, "d-name")


def test_a_password_code_comment_or_domain_refused_is_said_beside_its_field(world, member):  # noqa: F811
    """Refusals of a service's own checks (the current password, a password's length,
    a second factor's code, a domain's rules and owner) and a backup comment longer
    than the API takes: beside their field on the page, nothing changed; a typed
    password is never shown again."""
    org, b = member
    r = b.post("/account/password", {"current": "not my password", "new": "x" * 20},
               referer="/account")
    page = _text(r)
    assert r.status_code == 422 and "<h1>Your account</h1>" in page
    assert _field_error(page, "pw-current") == "The current password is not right."
    assert "not my password" not in page and "x" * 20 not in page
    r = b.post("/account/password", {"current": PASSWORD, "new": "short"}, referer="/account")
    assert _field_error(_text(r), "pw-new") == "The password must be 12 to 1024 characters long."
    r = b.post("/account/password", {"current": PASSWORD, "new": "a new long password"},
               referer="/account")
    assert r.status_code == 303
    assert "Your password is changed" in _text(b.get(r.headers["Location"]))
    sealed = re.search(r'name="sealed" value="([^"]+)"', _text(b.get("/account"))).group(1)
    r = b.post("/account/totp", {"sealed": sealed, "code": "000000"}, referer="/account")
    assert _field_error(_text(r), "t-code") == "The authentication code is not right."
    assert b.post("/account/totp", {"sealed": sealed, "code": "000000"}).status_code == 401

    env = world.environment(world.project(org))
    r = b.post(f"/environments/{env.id}/backups", {"comment": "y" * 1001},
               referer=f"/environments/{env.id}")
    page = _text(r)
    assert r.status_code == 422 and "Longer than maximum length 1000." in \
        _field_error(page, "b-comment")
    assert 'value="' + "y" * 1001 + '"' in page and Backup.select().count() == 0
    r = b.post(f"/environments/{env.id}/domains", {"domain": "192.0.2.7"},
               referer=f"/environments/{env.id}")
    assert _field_error(_text(r), "d-name") == "An IP address is not a domain."
    other = world.environment(env.project)
    assert b.post(f"/environments/{other.id}/domains", {"domain": "erp.acme-shop.com"},
                  referer=f"/environments/{other.id}").status_code == 303
    r = b.post(f"/environments/{env.id}/domains", {"domain": "erp.acme-shop.com"},
               referer=f"/environments/{env.id}")
    assert "erp.acme-shop.com is already the domain of environment" in \
        _field_error(_text(r), "d-name")
    assert CustomDomain.select().where(CustomDomain.environment == env.id).count() == 0
