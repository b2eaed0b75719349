"""What the console's pages tell a person, on both databases: which deployments
offer a rollback and how a rollback is named, the last deployment in the status
panel, backups' comments and sizes, webhooks whose receiver fails, a page that
does not exist, and a task id that is not one. (test_console.py: signing in and
the guards of every request; test_console_browser.py: the pages in a real browser.)"""

import datetime as dt
import html
import re
import time

import pytest

from control_plane.infra import security
from control_plane.models import (
    AutomationRule,
    Backup,
    Build,
    Deployment,
    Environment,
    EnvironmentMetric,
    RegistrationToken,
    WalFile,
)
from control_plane.services.servers import monitoring
from control_plane.services.tasks import engine
from control_plane.services.webhooks import delivery
from tests.conftest import auth
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


def _deployment(env, version, fake_clock, status="success", kind="deploy", **fields):
    """A settled task of the environment's history, a minute after the previous one."""
    fake_clock.advance(minutes=1)
    fields = {"started_at": fake_clock.now, "completed_at": fake_clock.now, **fields}
    return Deployment.create(environment=env, project=env.project_id, version=version, kind=kind,
                             trigger="manual", status=status, git_branch="main",
                             git_commit=f"{version:040x}", image_tag=f"erp:{version}",
                             config={"cpu_cores": 0.5, "ram_mb": 512}, **fields)


def _settle(task_id):
    """The agent's part: it takes the task and reports success."""
    engine.on_ack(task_id)
    engine.on_result(task_id, True, {}, None)


def _offered(page):
    """The deployments the history offers to roll back to."""
    return set(re.findall(r'action="/deployments/([0-9a-f-]+)/rollback"', page))


def _task_row(page, task):
    return re.search(rf"<tr>(?:(?!</tr>).)*task={task.id}(?:(?!</tr>).)*</tr>", page, re.S).group(0)


def test_rollback_is_offered_on_older_deployments_and_named_in_the_history(world, member,
                                                                            fake_clock):
    org, b = member
    env = world.environment(world.project(org))
    first = _deployment(env, 1, fake_clock)
    failed = _deployment(env, 2, fake_clock, status="failed")
    barred = _deployment(env, 3, fake_clock, can_rollback=False)
    current = _deployment(env, 4, fake_clock)  # what the environment runs now
    _deployment(env, 5, fake_clock, kind="restart")  # no code: 4 still runs
    page = _text(b.get(f"/environments/{env.id}"))
    # Neither the one running now, nor one a rollback would refuse.
    assert _offered(page) == {str(first.id)}
    assert str(current.id) not in _offered(page) and str(failed.id) not in _offered(page)
    assert str(barred.id) not in _offered(page)

    # Asked first, naming the target; nothing starts until confirmed.
    r = b.post(f"/deployments/{first.id}/rollback")
    assert r.status_code == 200 and f"Roll {env.name} back to version 1" in _text(r)
    assert not Deployment.select().where(Deployment.trigger == "rollback").exists()
    r = b.post(f"/deployments/{first.id}/rollback", {"confirmed": "1"})
    assert r.status_code == 303 and r.headers["Location"].endswith("done=rollback")
    fake_clock.advance(minutes=1)
    rollback = Deployment.get(Deployment.environment == env.id, Deployment.trigger == "rollback")
    _settle(rollback.id)
    page = _text(b.get(f"/environments/{env.id}?task={rollback.id}"))
    # Listed as what it was, and to which version; its log says so too.
    row = _task_row(page, rollback)
    assert "rollback to version 1" in row and ">deploy<" not in row
    assert "Task log: rollback to version 1 —" in page
    # It now runs version 1's code: rolling back to 1 again or to the rollback itself
    # would change nothing; version 4 is an older one now.
    assert _offered(page) == {str(current.id)}


def test_a_deploys_post_deploy_checks_are_shown_with_its_log(world, member, fake_clock):
    org, b = member
    env = world.environment(world.project(org))
    checks = [{"name": "websocket", "status": "failed",
               "detail": "https://erp.example.com/websocket through the proxy answered 502"},
              {"name": "cron", "status": "passed", "detail": "scheduled action 2 ran"}]
    failed = _deployment(env, 1, fake_clock, status="failed", extra_data={"checks": checks},
                         error_message="the post-deploy checks failed")
    plain = _deployment(env, 2, fake_clock)
    page = _text(b.get(f"/environments/{env.id}?task={failed.id}"))
    assert "Post-deploy checks" in page
    assert "websocket: failed</span> <small>https://erp.example.com/websocket through the " \
           "proxy answered 502</small>" in page
    assert "cron: passed" in page
    assert "Post-deploy checks" not in _text(b.get(f"/environments/{env.id}?task={plain.id}"))


def test_the_status_panel_says_the_last_deployment_once(world, member, fake_clock):
    org, b = member
    env = world.environment(world.project(org))
    _deployment(env, 1, fake_clock, kind="redeploy")
    panel = _text(b.get(f"/environments/{env.id}/status-panel"))
    (line,) = re.findall(r"Last deployment:[^<]*", panel)
    at = fake_clock.now.strftime("%Y-%m-%d %H:%M")
    assert line.split() == ["Last", "deployment:", "redeploy,", "completed", *at.split(),
                            "UTC"], line
    _deployment(env, 2, fake_clock, status="running", completed_at=None)
    panel = _text(b.get(f"/environments/{env.id}/status-panel"))
    (line,) = re.findall(r"Last deployment:[^<]*", panel)
    assert line.split()[2:5] == ["deploy,", "running", "since"], line


@pytest.mark.parametrize(("neutralized", "anonymized", "said"), [
    (None, None, None), (False, False, None),
    (True, False, "Neutralized (mail and scheduled jobs off)."),
    (True, True, "Neutralized (mail and scheduled jobs off), and anonymized (personal data "
                 "rewritten).")])
def test_the_status_panel_says_what_the_copy_is(world, member, neutralized, anonymized, said):
    org, b = member
    env = world.environment(world.project(org))
    Environment.update(neutralized=neutralized, anonymized=anonymized).where(
        Environment.id == env.id).execute()
    panel = _text(b.get(f"/environments/{env.id}/status-panel"))
    assert re.findall(r"Neutralized[^<]*", panel) == ([said] if said else [])


def _backup(b, env, comment=None):
    r = b.post(f"/environments/{env.id}/backups", {"comment": comment} if comment else {})
    assert r.status_code == 303, _text(r)
    return Backup.get(Backup.environment == env.id)


def _backups_section(b, env):
    page = _text(b.get(f"/environments/{env.id}"))
    return page[page.index('id="backups-h"'):page.index('id="domains-h"')]


def test_a_backups_comment_is_listed(world, member):
    org, b = member
    env = world.environment(world.project(org))
    assert _backup(b, env, "before the <b>upgrade</b>").notes == "before the <b>upgrade</b>"
    assert "before the &lt;b&gt;upgrade&lt;/b&gt;" in _backups_section(b, env)


def test_a_backups_size_is_what_is_stored_beside_its_data_in_1024_based_units(world, member):
    org, b = member
    server = world.server(org)
    env = world.environment(world.project(org, server))
    backup = _backup(b, env)
    # As the agent reports a small database: 7.9 MiB of data, 9 KiB stored.
    Backup.update(status="completed", database_size=8_283_750, filestore_size=0,
                  total_size=8_283_750, compressed_size=9_216).where(
        Backup.id == backup.id).execute()
    backups = _backups_section(b, env)
    assert re.search(r"<th[^>]*>Stored \(compressed\)</th><th[^>]*>Data \(uncompressed\)</th>",
                     backups)
    assert ('<td data-label="Stored (compressed)">9.0 KiB</td>'
            '<td data-label="Data (uncompressed)">7.9 MiB</td>') in backups
    # The restore picker names each backup with its type and stored size.
    assert re.search(rf'<option value="{backup.id}">[^<]* UTC \(manual, 9.0 KiB\)</option>',
                     backups), backups
    # One kind of unit in the whole console: 1024-based, named so.
    server_page = _text(b.get(f"/servers/{server.id}"))
    assert "8192 MiB" in server_page and "100 GiB" in server_page
    assert " MB" not in server_page and " GB" not in server_page


def test_a_drill_is_started_and_its_result_shown(world, member):
    org, b = member
    env = world.environment(world.project(org, world.server(org)))
    section = _backups_section(b, env)
    assert "No restore drill yet" in section and "Drill the newest backup" not in section
    backup = _backup(b, env)
    Backup.update(status="completed").where(Backup.id == backup.id).execute()
    Deployment.update(status="success").where(Deployment.id == backup.task_id).execute()
    assert "Drill the newest backup" in _backups_section(b, env)
    r = b.post(f"/environments/{env.id}/drills", {})
    assert r.status_code == 303, _text(r)
    drill = Deployment.get(Deployment.kind == "drill")
    assert drill.extra_data["backup_id"] == str(backup.id)
    Deployment.update(status="failed", error_message="the drill failed: <tampered>",
                      extra_data={**drill.extra_data, "tables": 3, "rows": 9}).where(
        Deployment.id == drill.id).execute()
    drills = _backups_section(b, env).split('id="drills-h"')[1]
    row = re.search(r'<tr><td data-label="Started">[^<]*UTC</td><td data-label="How">manual</td>'
                    r".*?</tr>", drills, re.S).group(0)
    assert 'class="error">failed: the drill failed: &lt;tampered&gt;' in row
    assert "3 tables, 9 rows" in row
    assert '<td data-label="Time to restore">—</td>' in row  # no time to restore


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
    delivery.run(app.extensions["berth"])
    receiver.wait_for(40)
    page = _text(b.get("/webhooks"))
    row = _webhook_row(page, failing.url)
    # No delivery has failed for good yet (failure_count 0), but all twenty retry.
    assert '<td data-label="Failed in a row">0</td>' in row and "20 retrying" in row, row
    assert "HTTP 500" in row, row
    row = _webhook_row(page, healthy.url)
    assert "0 retrying" not in row and "delivered" in row, row
    assert "HTTP 200" in row, row
    page = _text(b.get(f"/webhooks/{failing.id}"))
    assert "20 deliveries retrying · 0 failed" in page


def test_an_unknown_page_answers_html_to_a_browser_and_json_to_the_api(client, world):
    html = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    raw, _ = world.key(world.org())
    r = client.get("/no-such-page", headers=html)
    assert r.status_code == 404 and r.mimetype == "text/html"
    page = _text(r)
    assert '<meta charset="utf-8">' in page and "/console-assets/console.css" in page
    assert 'href="/"' in page
    assert r.headers["Content-Security-Policy"].startswith("default-src 'none'")
    # The API's paths keep the spec's body, whatever the client accepts; and a
    # client that asks for JSON gets JSON everywhere.
    for path, accept in (("/api/public/v1/no-such-thing", {**html, **auth(raw)}),
                         ("/api/v1/no-such-thing", html),
                         ("/no-such-page", {"Accept": "application/json"}),
                         ("/no-such-page", {})):
        r = client.get(path, headers=accept)
        assert r.status_code == 404 and r.is_json, path
        assert r.get_json()["error"] == "not_found", path


def test_a_task_id_that_is_not_one_is_no_task(world, member):
    org, b = member
    env = world.environment(world.project(org))
    for given in ("nope", "1234", "' or 1=1 --"):
        r = b.get(f"/environments/{env.id}", query_string={"task": given})
        assert r.status_code == 200, (given, _text(r))
        assert 'id="task-log"' in _text(r)
        r = b.get(f"/environments/{env.id}/task-log", query_string={"task": given})
        assert r.status_code == 200, (given, _text(r))
        assert "<h3>" not in _text(r)
    # The page still works afterwards (no transaction left broken).
    assert b.get(f"/environments/{env.id}").status_code == 200


def _actions(page):
    return re.findall(r'action="/environments/[0-9a-f-]+/actions/(\w+)"', page)


def test_the_page_offers_only_the_actions_the_lifecycle_allows(world, member):
    """Start is not offered on a running environment, nor Stop on a stopped one, and
    nothing while a task is in progress (each was offered, and accepted, before)."""
    org, b = member
    project = world.project(org)
    running = world.environment(project, "running")
    stopped = world.environment(project, "stopped")
    assert _actions(_text(b.get(f"/environments/{running.id}"))) == [
        "deploy", "redeploy", "restart", "stop"]
    assert _actions(_text(b.get(f"/environments/{stopped.id}"))) == ["deploy", "redeploy",
                                                                       "start"]
    Deployment.create(environment=running, project=project, kind="backup", trigger="manual",
                      status="running")
    page = _text(b.get(f"/environments/{running.id}"))
    assert _actions(page) == [] and "No action can start while a task is in progress" in page


def _tasks(env):
    return Deployment.select().where(Deployment.environment == env.id).count()


@pytest.mark.parametrize("action", ["deploy", "redeploy", "restart", "stop"])
@pytest.mark.parametrize("environment_type", ["development", "production"])
def test_a_disruptive_action_says_what_it_does_and_starts_only_once_confirmed(
        world, member, action, environment_type):
    """The first post is a question (what the action does); nothing starts until the
    form comes back confirmed, and for production with the name typed again. The
    page then says it started."""
    org, b = member
    env = world.environment(world.project(org))
    env.environment_type = environment_type
    env.save()
    r = b.post(f"/environments/{env.id}/actions/{action}")
    page = _text(r)
    assert r.status_code == 200 and f"<h1 id=\"confirm-h\">{action.capitalize()} {env.name}?" in page
    assert "users" in page and 'name="confirmed" value="1"' in page
    assert ('name="confirm_name"' in page) == (environment_type == "production")
    assert _tasks(env) == 0
    if environment_type == "production":
        for typed in ("", env.name.upper(), "x"):
            r = b.post(f"/environments/{env.id}/actions/{action}",
                       {"confirmed": "1", "confirm_name": typed})
            assert r.status_code == 422 and "exactly to confirm" in _text(r), typed
        assert _tasks(env) == 0
    r = b.post(f"/environments/{env.id}/actions/{action}",
               {"confirmed": "1", "confirm_name": env.name})
    assert r.status_code == 303 and _tasks(env) == 1
    page = _text(b.get(r.headers["Location"]))
    assert re.search(r'<p class="done" role="status">The \w+ has started: its log follows', page)


def test_start_is_not_asked_and_deleting_or_revoking_is(world, member, app):
    org, b = member
    stopped = world.environment(world.project(org), "stopped")
    assert b.post(f"/environments/{stopped.id}/actions/start").status_code == 303
    # A rule, a webhook and a key: each deletion asked, the key's name typed.
    raw, key = world.key(org)
    r = b.post(f"/keys/{key.public_id}/revoke")
    assert r.status_code == 200 and "cannot be undone" in _text(r)
    assert b.post(f"/keys/{key.public_id}/revoke", {"confirmed": "1"}).status_code == 422
    assert b.post(f"/keys/{key.public_id}/revoke",
                  {"confirmed": "1", "confirm_name": key.name}).status_code == 303
    found, _ = hook(org, "https://hooks.example.com/x", events=["deploy.started"])
    r = b.post(f"/webhooks/{found.id}/delete")
    assert r.status_code == 200 and "hooks.example.com/x" in _text(r)
    assert b.post(f"/webhooks/{found.id}/delete", {"confirmed": "1"}).status_code == 303


def _field(page, name):
    """The value a form field of the page holds (an input's value, a select's choice)."""
    found = re.search(rf'<input[^>]*name="{re.escape(name)}"[^>]*value="([^"]*)"', page)
    if found:
        return html.unescape(found.group(1))
    select = re.search(rf'<select[^>]*name="{re.escape(name)}".*?</select>', page, re.S)
    chosen = re.search(r"<option[^>]*selected[^>]*>([^<]*)<", select.group(0)) if select else None
    return chosen.group(1) if chosen else ""


def test_the_configuration_is_a_form_with_limits_and_errors_beside_their_fields(world, member):
    """Variables as rows (a secret's value never shown, kept when left blank), each
    known option with its limits and unit; only what changed is sent; a refused
    value is said beside its field with what was typed, and nothing changes."""
    org, b = member
    env = world.environment(world.project(org), "stopped")
    page = _text(b.get(f"/environments/{env.id}"))
    assert "0 to 64" in page and "milliseconds (0: none)" in page  # workers, statement_timeout
    assert "{&#34;variables&#34;" not in page and 'name="changes"' not in page  # no JSON box
    r = b.post(f"/environments/{env.id}/config", {
        "new.0.name": "SHOP_MODE", "new.0.value": "live",
        "new.1.name": "MAIL_TOKEN", "new.1.value": "s3cr3t-value", "new.1.secret": "1",
        "erp_options.workers": "2", "erp_options.list_db": "false",
        "postgres_settings.work_mem": "64MB", "postgres_settings.statement_timeout": ""})
    assert r.status_code == 303 and r.headers["Location"].endswith("done=configuration#config-h")
    _settle(Deployment.get(Deployment.environment == env.id).id)  # its redeploy, done
    stored = Environment.get_by_id(env.id)
    assert stored.erp_options == {"workers": 2, "list_db": False}
    assert stored.postgres_settings == {"work_mem": "64MB"}
    assert stored.variables["SHOP_MODE"] == {"value": "live", "secret": False}
    assert stored.variables["MAIL_TOKEN"]["secret"] and "s3cr3t" not in str(stored.variables)
    page = _text(b.get(f"/environments/{env.id}"))
    assert _field(page, "var.SHOP_MODE.value") == "live" and "s3cr3t-value" not in page
    assert _field(page, "erp_options.workers") == "2"
    assert _field(page, "erp_options.list_db") == "false"
    # The same form sent back changes nothing (a blank secret keeps its value).
    unchanged = {"var.SHOP_MODE.value": "live", "var.MAIL_TOKEN.value": "",
                 "var.MAIL_TOKEN.secret": "1", "erp_options.workers": "2",
                 "erp_options.list_db": "false", "postgres_settings.work_mem": "64MB"}
    r = b.post(f"/environments/{env.id}/config", unchanged)
    assert r.headers["Location"].endswith("done=nothing#config-h")
    assert Environment.get_by_id(env.id).variables == stored.variables
    # Refused: beside each field, in the rule's words, with what was typed; nothing saved.
    r = b.post(f"/environments/{env.id}/config", {
        **unchanged, "erp_options.workers": "100", "postgres_settings.work_mem": "lots",
        "new.0.name": "BERTH_X", "new.0.value": "x"})
    page = _text(r)
    assert r.status_code == 422 and 'role="alert"' in page
    assert re.search(r'id="erp_options-workers-err">An integer from 0 to 64\.<', page)
    assert re.search(r'id="postgres_settings-work_mem-err">A size such as', page)
    assert re.search(r'id="err-new-0">BERTH_X is reserved', page)
    assert _field(page, "erp_options.workers") == "100"  # what was typed, to correct
    assert _field(page, "new.0.name") == "BERTH_X"
    assert Environment.get_by_id(env.id).erp_options == {"workers": 2, "list_db": False}
    # Removing a variable and emptying an option removes them.
    r = b.post(f"/environments/{env.id}/config", {
        **unchanged, "var.SHOP_MODE.remove": "1", "erp_options.list_db": ""})
    assert r.status_code == 303
    stored = Environment.get_by_id(env.id)
    assert "SHOP_MODE" not in stored.variables and stored.erp_options == {"workers": 2}


def test_rules_are_made_and_edited_with_pickers_and_show_their_next_runs(world, member,
                                                                         fake_clock):
    """No JSON and no ids to type: trigger and action picked, environments by name; a
    schedule's next five runs in its own time zone as it is typed; problems beside
    their fields; the rule said in words, edited, and its runs listed."""
    org, b = member
    project = world.project(org, name="Shop")
    production = world.environment(project)
    production.name, production.environment_type = "Production", "production"
    production.save()
    page = _text(b.get(f"/projects/{project.id}/rules"))
    assert f'<option value="{production.id}">Production</option>' in page
    assert 'name="rule"' not in page  # no JSON box
    fake_clock.now = dt.datetime(2026, 3, 28, 12, 0)  # the day before Paris moves to summer time
    r = b.get("/rules/next-runs", query_string={"trigger.cron": "30 2 * * *",
                                                "trigger.timezone": "Europe/Paris"})
    runs = re.findall(r"<li>(.*?)</li>", _text(r))
    assert runs == ["Sun 2026-03-29 03:00", "Mon 2026-03-30 02:30", "Tue 2026-03-31 02:30",
                    "Wed 2026-04-01 02:30", "Thu 2026-04-02 02:30"], runs  # 02:30 skipped once
    r = b.get("/rules/next-runs", query_string={"trigger.cron": "61 * * * *"})
    assert "Not a valid cron expression" in _text(r)
    form = {"name": "Nightly backup", "enabled": "1", "trigger.type": "schedule",
            "trigger.cron": "0 3 * * *", "trigger.timezone": "Europe/Paris",
            "trigger.branch": "ignored", "action.type": "backup",
            "action.environment_id": str(production.id)}
    r = b.post(f"/projects/{project.id}/rules", {**form, "trigger.cron": "0 3 * *",
                                                  "action.environment_id": ""})
    page = _text(r)
    assert r.status_code == 422 and 'role="alert"' in page
    assert re.search(r'id="trigger-cron-err">Five fields are needed', page)
    assert re.search(r'id="action-environment_id-err">An environment of this project', page)
    assert 'value="0 3 * *"' in page  # what was typed, to correct
    r = b.post(f"/projects/{project.id}/rules", form)
    assert r.status_code == 303 and "done=created" in r.headers["Location"]
    rule = AutomationRule.get(AutomationRule.project == project.id)
    assert rule.trigger == {"type": "schedule", "cron": "0 3 * * *", "timezone": "Europe/Paris"}
    assert rule.action == {"type": "backup", "environment_id": str(production.id)}
    listed = _text(b.get(f"/projects/{project.id}/rules"))
    assert "0 3 * * * (Europe/Paris)" in listed and "back up Production" in listed
    # Edited on its own page, the form holding the rule as it is.
    page = _text(b.get(f"/rules/{rule.id}"))
    assert _field(page, "trigger.cron") == "0 3 * * *" and _field(page, "name") == "Nightly backup"
    assert "It has not run yet." in page and "Mon 2026-03-30 03:00" in page
    r = b.post(f"/rules/{rule.id}", {**form, "name": "Early backup", "trigger.cron": "0 1 * * *"})
    assert r.status_code == 303
    rule = AutomationRule.get_by_id(rule.id)
    assert (rule.name, rule.trigger["cron"]) == ("Early backup", "0 1 * * *")
    r = b.post(f"/rules/{rule.id}", {**form, "trigger.timezone": "Mars/Olympus"})
    assert r.status_code == 422 and "Not an IANA time zone name" in _text(r)
    assert AutomationRule.get_by_id(rule.id).trigger["timezone"] == "Europe/Paris"


def test_a_server_is_added_with_a_command_shown_once(app, world, member):
    """The servers page gives the install line with a single-use token (stored hashed,
    shown on that answer only); the token waits in the list until revoked (asked)."""
    org, b = member
    r = b.post("/servers/registration-tokens", {"server_name": "edge-2", "expires_in": "1h"})
    page = _text(r)
    assert r.status_code == 201
    command = re.search(r'<pre id="install-command" class="copyable">(.*?)</pre>', page,
                        re.S).group(1)
    raw = re.search(r"srt_live_\w+", command).group(0)
    assert "/install.sh" in command and "| sudo BERTH_CONTROL_PLANE=" in command
    token = RegistrationToken.get(RegistrationToken.organization == org.id)
    assert token.token_hash == security.digest(raw) and raw not in token.token_hash
    assert (token.server_name, token.status) == ("edge-2", "pending")
    listed = _text(b.get("/servers"))
    assert "Waiting for their server" in listed and raw not in listed
    assert f"Revoke {token.token_prefix}…" in listed
    # Bad input is said beside nothing changed.
    r = b.post("/servers/registration-tokens", {"expires_in": "forever"})
    assert r.status_code == 422 and "expires_in" in _text(r)
    assert RegistrationToken.select().count() == 1
    path = f"/servers/registration-tokens/{token.id}/revoke"
    assert b.post(path).status_code == 200  # asked first
    assert b.post(path, {"confirmed": "1"}).status_code == 303
    assert RegistrationToken.get_by_id(token.id).status == "revoked"
    assert "Waiting for their server" not in _text(b.get("/servers"))


def test_wal_archiving_is_shown_and_its_failure_stands_out(world, member, fake_clock):
    org, b = member
    env = world.environment(world.project(org, world.server(org)))

    def archiving():
        section = _backups_section(b, env)
        return section[section.index('id="wal-h"'):section.index('id="drills-h"')]
    assert "Off: the database" in archiving()
    Environment.update(environment_type="production").where(Environment.id == env.id).execute()
    assert "from the next deploy" in archiving()
    now = fake_clock.now
    waiting = (now - dt.timedelta(seconds=40)).isoformat() + "Z"
    Environment.update(wal_reported_at=now, wal_report={
        "pending": 2, "oldest_pending_at": waiting}).where(
        Environment.id == env.id).execute()
    shown = archiving()
    assert "Archiving: 0 WAL files" in shown and "2 waiting on the server for 40 s" in shown
    Environment.update(wal_report={"pending": 1, "error": "000000010000000000000003: <HTTP 503>"}
                       ).where(Environment.id == env.id).execute()
    assert ('class="error" role="alert">Failing: uploading WAL failed: '
            "000000010000000000000003: &lt;HTTP 503&gt;") in archiving()


def test_the_point_in_time_window_is_shown_and_a_moment_restored(world, member, fake_clock):
    org, b = member
    env = world.environment(world.project(org, world.server(org)))
    start = fake_clock.now - dt.timedelta(hours=2)
    Backup.create(environment=env, status="completed", completed_at=start,
                  manifest={"base": {"object": "base.tar.zst", "start_lsn": "0/3000028",
                                     "system_identifier": "7301234567890123456",
                                     "timeline": 1}})
    for n in (3, 4):
        WalFile.create(environment=env, name=f"7301234567890123456/00000001000000000000000{n}.zst",
                       key="k", size=1, sha256="a" * 64, stored_at=fake_clock.now,
                       archived_at=start + dt.timedelta(hours=n - 2))
    section = _backups_section(b, env)
    end = start + dt.timedelta(hours=2)
    assert (f"Restorable to any moment from {start:%Y-%m-%d %H:%M:%S} to "
            f"{end:%Y-%m-%d %H:%M:%S} UTC") in section
    assert f'min="{start:%Y-%m-%dT%H:%M:%S}" max="{end:%Y-%m-%dT%H:%M:%S}"' in section
    r = b.post(f"/environments/{env.id}/restore",
               {"confirm_name": env.name, "target_time": "noon"})
    assert r.status_code == 422 and "date and a time" in _text(r)
    r = b.post(f"/environments/{env.id}/restore", {
        "confirm_name": env.name, "target_time": f"{start - dt.timedelta(minutes=1):%Y-%m-%dT%H:%M:%S}"})
    assert r.status_code == 422 and f"Choose a moment from {start:%Y-%m-%d %H:%M:%S}" in _text(r)
    # From the page: the refusal beside the field of the form sent, that form open.
    early = f"{start - dt.timedelta(minutes=1):%Y-%m-%dT%H:%M:%S}"
    page = _text(b.post(f"/environments/{env.id}/restore", {
        "confirm_name": env.name, "target_time": early}, referer=f"/environments/{env.id}"))
    said = re.search(r'<span class="field-error" id="t-time-err">([^<]*)</span>', page)
    assert said and said.group(1) == (f"Choose a moment from {start:%Y-%m-%d %H:%M:%S} to "
                                      f"{end:%Y-%m-%d %H:%M:%S} UTC.")
    assert f'value="{early}" aria-invalid="true"' in page
    assert '<details class="panel danger" open>\n    <summary>Restore to a moment' in page
    page = _text(b.post(f"/environments/{env.id}/restore", {
        "confirm_name": "prod", "backup_id": str(Backup.get().id)},
        referer=f"/environments/{env.id}"))
    assert f'id="r-confirm-err">Type the environment&#39;s name, {env.name}, exactly' in page
    assert 't-time-err' not in page and 't-confirm-err' not in page
    page = _text(b.post(f"/environments/{env.id}/destroy", {"confirm_name": "prod"},
                        referer=f"/environments/{env.id}"))
    assert 'id="x-confirm-err">Type the environment&#39;s name' in page
    bare = world.environment(env.project)
    r = b.post(f"/environments/{bare.id}/restore", {"confirm_name": bare.name,
                                                     "target_time": early})
    assert r.status_code == 422 and "Nothing is restorable to a moment yet" in _text(r)
    assert not Deployment.select().where(Deployment.environment == env.id).exists()
    r = b.post(f"/environments/{env.id}/restore", {
        "confirm_name": env.name, "target_time": f"{start + dt.timedelta(hours=1):%Y-%m-%dT%H:%M:%S}"})
    assert r.status_code == 303, _text(r)
    task = Deployment.get(Deployment.environment == env.id)
    assert task.kind == "restore" and task.extra_data["point_in_time"]["target_time"] == \
        f"{start + dt.timedelta(hours=1):%Y-%m-%dT%H:%M:%S}"


def test_what_the_size_is_made_of_is_shown_and_missing_files_stand_out(world, member):
    org, b = member
    env = world.environment(world.project(org, world.server(org)))

    def made_of():
        page = _text(b.get(f"/environments/{env.id}"))
        return page[page.index('id="size-h"'):page.index('id="tasks-h"')]
    assert "Not measured yet" in made_of()
    monitoring.record_disk_usage(env.server_id, [{
        "environment_id": str(env.id), "measured_at_unix_ms": int(time.time() * 1000),
        "database_bytes": 40 * 1024 * 1024, "filestore_bytes": 3 * 1024 * 1024,
        "made_of": {"largest_tables": [{"name": "mail_<message>", "bytes": 9 * 1024 * 1024,
                                        "rows": 1200}],
                    "filestore_files": 7, "attachments_missing": 2, "files_orphaned": 1,
                    "missing_sample": ["ab/ab01", "<cd>/cd02"]}}])
    shown = made_of()
    assert "database 40.0 MiB" in shown and "filestore 3.0 MiB in 7 files" in shown
    assert ('class="error" role="alert">2 attachments missing their file: <code>ab/ab01</code>, '
            "<code>&lt;cd&gt;/cd02</code>") in shown
    assert "1 file in the filestore no attachment names" in shown
    assert "<code>mail_&lt;message&gt;</code>" in shown and "9.0 MiB" in shown and "1200" in shown
    # A day of history: the growth beside each figure.
    day_ago = int(time.time()) - 86400
    EnvironmentMetric.insert(step=3600, at=day_ago - day_ago % 3600, n=60, environment_id=env.id,
                             database_bytes=20 * 1024 * 1024,
                             filestore_bytes=3 * 1024 * 1024).execute()
    shown = made_of()
    assert re.search(r"database 40\.0 MiB \(\+(19|20)\.\d MiB a day\)", shown), shown
    assert "in 7 files (+0 Bytes a day)" in shown
    Environment.update(disk_made_of={"largest_tables": [], "filestore_files": 2,
                                     "attachments_missing": 0, "files_orphaned": 0,
                                     "missing_sample": []}).where(Environment.id == env.id).execute()
    assert "Every attachment has its file." in made_of()


def test_a_build_rule_from_the_form_and_the_builds_by_branch(world, member):
    """A `test` rule picked in the form; the project's builds, of one branch; one
    build's tests with the failures first, each failure's traceback shown; another
    organization's build is not found."""
    org, b = member
    project = world.project(org, name="Shop")
    r = b.post(f"/projects/{project.id}/rules", {
        "name": "Builds", "enabled": "1", "trigger.type": "git_push",
        "trigger.branch": "feature/*", "action.type": "test", "action.keep_hours": "6"})
    assert r.status_code == 303, _text(r)
    rule = AutomationRule.get(AutomationRule.project == project.id)
    assert rule.action == {"type": "test", "source_environment_id": None, "keep_hours": 6,
                           "remove_on_success": False}
    assert "build each push: the changed modules&#39; tests, on an empty database" in _text(
        b.get(f"/projects/{project.id}/rules"))
    tests = [{"name": "TestOrder.test_tax", "module": "shop", "status": "failed",
              "seconds": 0.25, "failure": "AssertionError: 0 != 21 : VAT missing"},
             {"name": "TestOrder.test_total", "module": "shop", "status": "passed",
              "seconds": 0.1, "failure": None}]
    failed = Build.create(organization=org.id, project=project.id, branch="feature/tax",
                          commit="a" * 40, status="failed", stage="test", tests=tests,
                          counts={"tests": 2, "passed": 1, "failed": 1, "error": 0,
                                  "skipped": 0}, reason="1 failed, 0 error(s) of 2 tests")
    Build.create(organization=org.id, project=project.id, branch="feature/ok",
                 commit="b" * 40, status="running", stage="create")
    assert "/builds" in _text(b.get(f"/projects/{project.id}"))
    page = _text(b.get(f"/projects/{project.id}/builds"))
    assert "feature/tax" in page and "feature/ok" in page and "1 of 2 passed" in page
    page = _text(b.get(f"/projects/{project.id}/builds", query_string={"branch": "feature/ok"}))
    assert "feature/ok" in page and "feature/tax" not in page
    page = _text(b.get(f"/builds/{failed.id}"))
    assert page.index("TestOrder.test_tax") < page.index("TestOrder.test_total")
    assert "AssertionError: 0 != 21 : VAT missing" in page
    assert "Modules tested: —" in page
    other = world.project(world.org())
    stranger = Build.create(organization=other.organization_id, project=other.id,
                            branch="main", status="queued")
    assert b.get(f"/builds/{stranger.id}").status_code == 404
