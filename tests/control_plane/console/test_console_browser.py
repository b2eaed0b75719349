"""The web console in a real browser: Debian's chromium driven by Playwright, against
a real `berth serve` with a real agent and real containers. Sign in, see a project,
create an environment and watch its task log arrive, charts drawn from stored
history, a backup taken (its comment and sizes listed) and restored after typing
the name, a redeploy then a rollback to the first deployment, a failing webhook
receiver, a typed `<script>` shown as text, a write without the CSRF token
refused, an ended session signed out, a read-only user without write controls,
an unknown address; axe-core on every page (light, dark, phone), the pages that
show a secret once and a refused form. No page breaks its Content-Security-Policy. A screenshot of
each page, at 1280 and 390 px, is saved under build/test-artifacts/console."""

import base64
import datetime as dt
import json
import os
import re
import shutil
import signal
import urllib.request
from pathlib import Path

import docker
import pytest

from agent.deploy.environments import Environments, erp_address
from control_plane.app import create_app
from control_plane.models import (
    ApiKey,
    AuditEvent,
    Build,
    Deployment,
    Environment,
    Event,
    Organization,
    Project,
    Server,
    Webhook,
    WebhookDelivery,
)
from control_plane.models.metrics import (
    ENVIRONMENT_SERIES,
    SERVER_SERIES,
    EnvironmentMetric,
    ServerMetric,
)
from control_plane.services.automation import rules
from tests.control_plane.webhooks.test_delivery import hook
from tests.support.agents import AgentProcess, registered_server, wait_for
from tests.support.git_repo import shop_repo
from tests.support.serve import Served
from tests.support.services import free_port

playwright = pytest.importorskip("playwright.sync_api")
AXE = (Path(__file__).resolve().parents[2] / "support" / "vendor" / "axe.min.js").read_text()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("BERTH_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts")) \
    / "console"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                                          "(make test installs it)")]


class Stand:
    """`berth serve`, its database read here too (SQLite in its data dir), an
    organization with a project on a server whose real agent is connected, a
    full-access and a read-only console user, and one browser."""

    def __init__(self, tmp, erp_image, postgres_image):
        self.tmp, self.root = tmp, tmp / "srv"
        self.served = Served(tmp / "cp", {"CP_ERP_IMAGE": erp_image, "CP_PROXY_IMAGE": "",
                                          "CP_POSTGRES_IMAGE": postgres_image})
        self.app = self.agent = self.browser = self.pw = None
        self.envs = []

    def setup(self):
        self.served.start(grpc_port=free_port())
        self.url = self.served.url
        org = self.served.admin("org", "create", "--name", "Acme")
        self.users = {}
        self.states = {}  # each user's signed-in browser state: one sign-in each
        for who, access in (("admin", "full_access"), ("viewer", "read_only"),
                            ("leaver", "full_access")):
            made = self.served.admin(
                "user", "create", "--org", org["id"], "--name", who, "--email",
                f"{who}@example.com", "--access", access,
                "--permission", "project.environments.deploy")
            password = self.served.admin("user", "password", made["id"], "--generate")["password"]
            self.users[who] = (made["id"], made["email"], password)
        self.app = create_app({"DATA_DIR": str(self.tmp / "cp"), "PROXY_IMAGE": ""})
        self.org = Organization.get_by_id(org["id"])
        self.server, credential = registered_server(self.org, name="shop-server")
        self.project = Project.create(organization=self.org, name="Shop", server=self.server,
                                      default_branch="main",
                                      git_repo_url=f"file://{shop_repo(self.tmp)}")
        self.agent = AgentProcess(self.tmp, self.served.grpc, self.server.id, credential,
                                  env={"BERTH_AGENT_ENV_ROOT": str(self.root)}).start()
        self.pw = playwright.sync_playwright().start()
        self.browser = self.pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu",
            # Nothing but this machine resolves: a page needing the internet fails.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"])
        ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def page(self, who="admin", width=1280, height=720):
        """A signed-in page in a context of its own, recording what the console said."""
        context = self.browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.problems = []
        self._watch(page)
        if who in self.states:
            page.close()
            context = self.browser.new_context(viewport={"width": width, "height": height},
                                               storage_state=self.states[who])
            page = context.new_page()
            page.problems = []
            self._watch(page)
            page.goto(self.url + "/projects")
            return page
        _, email, password = self.users[who]
        page.goto(self.url + "/")
        page.get_by_label("E-mail").fill(email)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(self.url + "/")  # the overview
        self.states[who] = context.storage_state()
        return page

    @staticmethod
    def _watch(page):
        # Errors, and whatever the page's policy refused (the test's own canvas reads
        # draw a performance warning, not counted).
        page.on("console", lambda m: (m.type == "error" or "Content Security Policy" in m.text)
                and page.problems.append(m.text))
        page.on("pageerror", lambda e: page.problems.append(str(e)))
        page.on("dialog", lambda d: (page.problems.append(f"dialog: {d.message}"), d.dismiss()))

    def close(self, docker_client):
        if self.browser is not None:
            self.browser.close()
        if self.pw is not None:
            self.pw.stop()
        if self.agent is not None and self.agent.proc is not None:
            self.agent.kill(signal.SIGTERM)
        if getattr(self.served, "proc", None) is not None and self.served.proc.poll() is None:
            self.served.stop()
        envs = Environments(docker_client, root=self.root)
        for env in Environment.select().where(Environment.project == self.project.id):
            envs.destroy(str(env.id), True, lambda *a: None)
        if self.app is not None:
            self.app.extensions["berth"].db.close()


@pytest.fixture(scope="module")
def stand(tmp_path_factory, erp_image, postgres_image, docker_client):
    s = Stand(tmp_path_factory.mktemp("console"), erp_image, postgres_image)
    try:
        s.setup()
        wait_for(lambda: Server.get_by_id(s.server.id).connected_since is not None, timeout=60,
                 what="the agent connected")
        yield s
    finally:
        s.close(docker_client)


def shot(page, name):
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def clean(page):
    """Nothing the page ran into: no script error, no refused resource or policy."""
    assert page.problems == [], page.problems


# What a page load cost on the wire: the document and every resource, compressed; and
# how many of the console's assets were fetched rather than taken from the cache.
WEIGHT = """() => {
    const resources = performance.getEntriesByType('resource');
    return {bytes: performance.getEntriesByType('navigation')[0].transferSize
                   + resources.reduce((sum, r) => sum + r.transferSize, 0),
            assets: resources.filter(r => r.name.includes('/console-assets/')
                                          && r.transferSize > 0).length};
}"""


def accessibility_violations(page):
    """What axe-core (vendored from npm, tests/support/vendor) finds on the page as it
    is now: each violated rule with the first offending element. Evaluated through
    the browser's debugging protocol, which the page's script policy does not cover,
    so the page keeps the policy it is served with."""
    found = page.evaluate(AXE + """
        ;axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations.map(
            v => [v.id, v.impact, v.nodes.length, v.nodes[0].target.join(" ")]))""")
    return found


@pytest.fixture(scope="module")
def deployed(stand):
    """An environment made through the console, its first deployment watched live."""
    page = stand.page()
    shot(page, "projects")
    page.get_by_role("link", name="Shop", exact=True).click()
    page.get_by_label("Name", exact=True).fill("Staging")
    page.get_by_role("button", name="Create and deploy").click()
    page.wait_for_url("**/environments/*")
    env = Environment.get(Environment.project == stand.project.id, Environment.name == "Staging")
    # The task log fills while the deployment runs (htmx polls it), then stops.
    log = page.locator("#task-log pre")
    log.filter(has_text="checking out").wait_for(timeout=120_000)
    page.locator('#task-log[data-live="false"]').wait_for(timeout=180_000)
    page.locator("#status .s-running").wait_for(timeout=30_000)
    shot(page, "environment")
    assert Deployment.get(Deployment.environment == env.id).status == "success"
    clean(page)
    page.context.close()
    return env


def test_projects_environment_and_its_task_log(stand, deployed):
    page = stand.page()
    page.goto(f"{stand.url}/projects/{stand.project.id}")
    row = page.locator("#environments tr", has_text="Staging")
    assert row.locator(".status").inner_text() == "running"
    shot(page, "project")
    row.get_by_role("link", name="Staging").click()
    tasks = page.locator("#tasks tbody tr")
    assert tasks.count() == 1 and "deploy" in tasks.first.inner_text()
    # The deployment running now is not offered as a rollback target.
    assert page.get_by_role("button", name="Roll back to this").count() == 0
    last = page.locator("#status p", has_text="Last deployment").inner_text()
    assert last.startswith("Last deployment: deploy, completed ") and last.endswith(" UTC"), last
    assert "checking out" in page.locator("#task-log pre").inner_text()
    # The deploy log as steps: when each began after the task started, how long it took.
    steps = page.locator("#task-log .step")
    assert steps.count() >= 5 and steps.locator(".at").count() == steps.count()
    assert re.fullmatch(r"\s*\d+\.\d s", steps.first.locator(".at").inner_text())
    assert page.locator("#task-log .step .took").count() >= 1
    assert page.locator("#task-log .current").count() == 0  # it ended: nothing runs now
    # Runtime logs, asked of the agent when the button is pressed (htmx).
    page.get_by_role("button", name="ERP logs").click()
    page.locator("#runtime-logs h3").wait_for(timeout=30_000)
    assert page.locator("#runtime-logs h3").inner_text().startswith("ERP — last ")
    clean(page)
    page.context.close()


def _fail_a_statement(stand, env, table, docker_client):
    """PostgreSQL of the environment logs an ERROR (a table that is not there)."""
    name = Environments(docker_client, root=stand.root)._names(str(env.id))["db"]
    docker_client.containers.get(name).exec_run(
        ["psql", "-U", "odoo", "-d", "odoo", "-c", f"SELECT * FROM {table}"])


def test_runtime_logs_follow_live_filter_search_and_download(stand, deployed, docker_client):
    page = stand.page()
    page.goto(f"{stand.url}/environments/{deployed.id}")
    # No proxy logs are offered: no agent reads them (the button said the server could
    # not be reached, whatever the server's state).
    assert page.get_by_role("button", name="Proxy logs").count() == 0
    _fail_a_statement(stand, deployed, "no_such_table", docker_client)
    page.get_by_role("button", name="PostgreSQL logs").click()
    page.locator("#runtime-logs h3", has_text="PostgreSQL").wait_for(timeout=30_000)
    lines = page.locator("#runtime-logs .line")
    errors = page.locator('#runtime-logs .line[data-level="error"]').count()
    assert errors >= 1 and lines.count() > errors
    page.get_by_label("Level", exact=True).select_option("error")
    assert page.locator("#runtime-logs .line:visible").count() == errors
    page.get_by_label("Search", exact=True).fill("no_such_table")
    shown = page.locator("#runtime-logs .line:visible")
    assert shown.count() >= 1 and all("no_such_table" in t for t in shown.all_inner_texts())
    # Followed: a new error arrives without a reload, through the same filters.
    page.get_by_label("Search", exact=True).fill("another_missing")
    page.get_by_label("Follow live").check()
    _fail_a_statement(stand, deployed, "another_missing", docker_client)
    page.locator("#runtime-logs .line:visible", has_text="another_missing").wait_for(
        timeout=20_000)
    page.get_by_label("Follow live").uncheck()
    href = page.get_by_role("link", name="Download").get_attribute("href")
    assert "source=postgres" in href
    got = page.request.get(stand.url + href)
    assert got.status == 200 and "attachment" in got.headers["content-disposition"]
    assert "another_missing" in got.text() and got.headers["content-type"].startswith("text/plain")
    shot(page, "runtime-logs")
    clean(page)
    page.context.close()


def _seed_history(env, server, now):
    """Seven days of hours and the last hour of minutes, as the scheduler keeps them."""
    hour, minute = 3600, 60
    end = int(now.timestamp()) // minute * minute
    rows = [(3600, end // hour * hour - i * hour) for i in range(1, 7 * 24)]
    rows += [(60, end - i * minute) for i in range(0, 60)]
    for step, at in rows:
        figures = {s: 10.0 + (at // step) % 7 for s in ENVIRONMENT_SERIES}
        figures.update({s: 2e8 for s in ENVIRONMENT_SERIES if s.endswith("_bytes")})
        EnvironmentMetric.insert(step=step, at=at, n=1, environment_id=env.id,
                                 **figures).on_conflict_ignore().execute()
        ServerMetric.insert(step=step, at=at, n=1, server_id=server.id,
                            **{s: 20.0 + (at // step) % 5 for s in SERVER_SERIES}
                            ).on_conflict_ignore().execute()


def _drawn(page):
    """Each chart's points, and whether its canvas has any painted pixel."""
    return page.evaluate("""() => [...document.querySelectorAll('figure.chart')].map(f => {
        const c = f.querySelector('canvas');
        if (!c) return [Number(f.dataset.points || 0), false];
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let painted = false;
        for (let i = 3; i < d.length; i += 4) { if (d[i] !== 0) { painted = true; break; } }
        return [Number(f.dataset.points || 0), painted];
    })""")


def test_charts_draw_from_stored_history(stand, deployed):
    _seed_history(deployed, stand.server, dt.datetime.now(dt.UTC))
    page = stand.page()
    page.goto(f"{stand.url}/environments/{deployed.id}")
    for name, range_ in (("1 hour", "1h"), ("24 hours", "24h"), ("7 days", "7d")):
        page.get_by_role("button", name=name, exact=True).click()
        page.locator(f'.charts[data-loaded="{range_}"]').wait_for()
        drawn = _drawn(page)
        assert len(drawn) == 3 and all(points > 0 and painted for points, painted in drawn), \
            (range_, drawn)
    # Seven days of hours: about 168 points per series (two series on the CPU chart).
    assert _drawn(page)[0][0] >= 2 * 160
    # The x axis is the range asked for, not the span of the points stored; the
    # deployments in it are marked; each chart has its figures as a table too.
    span = page.evaluate("""() => { const u = document.querySelector('figure.chart')._plot;
        return u.scales.x.max - u.scales.x.min; }""")
    assert abs(span - 7 * 24 * 3600) < 120, span
    deploys = Deployment.select().where(Deployment.environment == deployed.id,
                                        Deployment.status == "success").count()
    marked = page.locator("figure.chart").first.get_attribute("data-deploys")
    assert deploys >= 1 and int(marked) >= 1, (deploys, marked)
    table = page.locator("figure.chart").nth(1).locator("table.chart-data")
    assert table.locator("caption").inner_text() == "Memory: the range's figures"
    assert table.locator("tbody tr").all_inner_texts()[0].split("\t")[:2] == ["ERP", "190.7 MiB"]
    # Pointing at the memory chart shows its values as the rest of the console
    # shows sizes (2e8 bytes: 190.7 MiB).
    page.locator("figure.chart").nth(1).locator(".u-over").hover()
    values = page.locator("figure.chart").nth(1).locator(".u-legend .u-value").all_inner_texts()
    assert "190.7 MiB" in values, values
    shot(page, "environment-charts")
    page.goto(f"{stand.url}/servers/{stand.server.id}")
    page.locator('.charts[data-loaded="1h"]').wait_for()
    assert all(points > 0 and painted for points, painted in _drawn(page))
    page.locator("#live p").first.wait_for()
    shot(page, "server")
    page.goto(f"{stand.url}/servers")
    shot(page, "servers")
    clean(page)
    page.context.close()


def test_backup_then_restore_after_typing_the_name(stand, deployed):
    page = stand.page()
    page.goto(f"{stand.url}/environments/{deployed.id}")
    page.get_by_label("Comment (optional)").fill("before the upgrade")
    page.get_by_role("button", name="Take a backup").click()
    page.wait_for_url("**/environments/*")
    page.locator('#task-log[data-live="false"]').wait_for(timeout=180_000)

    def completed():
        page.reload()
        return page.locator("section", has_text="Backups").locator(
            "td", has_text="completed").count() > 0
    wait_for(completed, timeout=60, interval=1, what="the backup completed")
    row = page.locator("section", has_text="Backups").locator("tr", has_text="before the upgrade")
    cells = row.locator("td").all_inner_texts()
    stored, data = cells[4], cells[5]  # "Stored (compressed)", "Data (uncompressed)"
    assert all(re.fullmatch(r"[\d.]+ (Bytes|KiB|MiB|GiB)", size) for size in (stored, data)), cells
    download = page.get_by_role("link", name="database").first.get_attribute("href")
    assert download.startswith("/backups/")
    # The link hands out the dump (through its signed URL), and that is an audit event
    # of the user.
    dump = page.request.get(stand.url + download)
    assert dump.status == 200 and len(dump.body()) > 0
    backup_id = download.split("/")[2]
    event = AuditEvent.get(AuditEvent.action == "backup.download",
                           AuditEvent.target_id == backup_id)
    assert (event.actor_type, event.actor_name) == ("user", "admin@example.com")
    page.get_by_text("Restore a backup").click()
    page.get_by_label("Type the environment's name").first.fill("staging")  # not its name
    page.get_by_role("button", name="Restore").click()
    # Refused beside the field, the form still open on the environment's page.
    said = page.locator("#r-confirm-err")
    assert "Type the environment's name, Staging, exactly" in said.inner_text()
    assert page.locator("#r-confirm").get_attribute("aria-invalid") == "true"
    assert accessibility_violations(page) == [], "restore refused"
    assert Deployment.select().where(Deployment.environment == deployed.id,
                                     Deployment.kind == "restore").count() == 0
    page.locator("#r-confirm").fill("Staging")
    page.get_by_role("button", name="Restore").click()
    page.wait_for_url("**/environments/*")
    assert "restore" in page.locator("#task-log h3").inner_text()
    page.locator('#task-log[data-live="false"]').wait_for(timeout=240_000)
    restore = Deployment.get(Deployment.environment == deployed.id, Deployment.kind == "restore")
    assert restore.status == "success", restore.error_message
    shot(page, "environment-restored")
    page.context.close()


def test_a_typed_script_is_shown_as_text(stand):
    page = stand.page()
    name = "<script>window.pwned = 1</script><img src=x onerror=alert(1)>"
    page.get_by_text("New project").click()
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_role("button", name="Create project").click()
    page.wait_for_url("**/projects/*")
    assert page.locator("h1").inner_text() == name
    assert page.evaluate("() => window.pwned === undefined")
    page.goto(f"{stand.url}/projects")
    assert page.get_by_role("link", name=name).count() == 1
    page.goto(f"{stand.url}/audit")
    shot(page, "audit")
    for path in ("/webhooks", "/keys", "/account"):
        page.goto(stand.url + path)
        shot(page, path.strip("/"))
    clean(page)  # no dialog opened, no script ran
    page.context.close()


def test_a_write_without_the_csrf_token_is_refused(stand):
    page = stand.page()
    before = Project.select().count()
    r = page.request.post(f"{stand.url}/projects", form={
        "name": "forged", "server_id": str(stand.server.id)}, headers={"Origin": stand.url})
    assert r.status == 403 and "expired" in r.text()
    token = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    r = page.request.post(f"{stand.url}/projects", form={
        "name": "forged", "server_id": str(stand.server.id), "csrf_token": token},
        headers={"Origin": "https://evil.example"})
    assert r.status == 403
    assert Project.select().count() == before
    page.context.close()


def test_an_ended_session_is_signed_out_on_its_next_request(stand):
    page = stand.page("leaver")
    user_id = stand.users["leaver"][0]
    assert stand.served.admin("user", "sign-out", user_id)["sessions_ended"] >= 1
    page.goto(f"{stand.url}/keys")
    assert "/sign-in" in page.url
    assert page.get_by_role("button", name="Sign in").count() == 1
    shot(page, "sign-in")
    assert accessibility_violations(page) == [], "sign-in"
    page.context.close()


def test_a_read_only_user_has_no_write_controls_and_is_refused_anyway(stand, deployed):
    page = stand.page("viewer", width=390, height=844)  # a phone
    page.goto(f"{stand.url}/environments/{deployed.id}")
    assert page.locator("#status .status").inner_text() == "running"
    for label in ("Redeploy", "Take a backup", "Destroy", "Restore", "Add"):
        assert page.get_by_role("button", name=label, exact=True).count() == 0, label
    shot(page, "environment-read-only-phone")
    token = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    r = page.request.post(f"{stand.url}/environments/{deployed.id}/actions/restart",
                          form={"csrf_token": token}, headers={"Origin": stand.url})
    assert r.status == 403 and "read-only" in r.text()
    assert not Deployment.select().where(Deployment.environment == deployed.id,
                                         Deployment.kind == "restart").exists()
    clean(page)
    page.context.close()


def test_a_redeploy_then_a_rollback_to_the_first_deployment(stand, deployed):
    # A receiver the platform refuses to call (a private address): its deliveries
    # of the deployments' events retry.
    failing, _ = hook(stand.org, "https://127.0.0.1:9/failing",
                      events=["deploy.started", "deploy.completed"])
    page = stand.page()
    page.goto(f"{stand.url}/environments/{deployed.id}")
    page.get_by_role("button", name="Redeploy", exact=True).click()
    # Asked first: what a redeploy does, then confirmed; the page says it started.
    page.locator("#confirm-h", has_text=f"Redeploy {deployed.name}?").wait_for()
    shot(page, "confirm-redeploy")
    assert accessibility_violations(page) == [], "confirm-redeploy"
    page.get_by_role("button", name="Redeploy", exact=True).click()
    page.wait_for_url("**/environments/*")
    assert page.get_by_role("status").first.inner_text().startswith(
        "The redeployment has started")
    page.locator('#task-log[data-live="false"]').wait_for(timeout=180_000)
    first = Deployment.get(Deployment.environment == deployed.id, Deployment.version == 1)
    second = Deployment.get(Deployment.environment == deployed.id, Deployment.kind == "redeploy")
    assert second.status == "success", second.error_message
    page.reload()
    # Only the older deployment is offered: the redeploy is what runs now.
    offered = page.locator("#tasks tr", has=page.get_by_role("button", name="Roll back to this"))
    assert offered.count() == 1 and f"task={first.id}" in offered.inner_html()
    offered.get_by_role("button", name="Roll back to this").click()
    page.locator("#confirm-h", has_text=f"Roll {deployed.name} back to version 1").wait_for()
    page.get_by_role("button", name="Rollback", exact=True).click()
    page.wait_for_url("**/environments/*")
    assert "rollback to version 1" in page.locator("#task-log h3").inner_text()
    page.locator('#task-log[data-live="false"]').wait_for(timeout=180_000)
    rollback = Deployment.get(Deployment.environment == deployed.id,
                              Deployment.trigger == "rollback")
    assert rollback.status == "success", rollback.error_message
    page.reload()
    row = page.locator("#tasks tr", has=page.locator(f'a[href*="task={rollback.id}"]'))
    assert "rollback to version 1" in row.inner_text()
    assert page.locator("#status p", has_text="Last deployment").inner_text().startswith(
        "Last deployment: rollback to version 1, completed ")
    # Version 1's code runs again: now the redeploy is the one to go back to.
    offered = page.locator("#tasks tr", has=page.get_by_role("button", name="Roll back to this"))
    assert offered.count() == 1 and f"task={second.id}" in offered.inner_html()
    shot(page, "environment-rolled-back")

    def retrying():
        page.goto(f"{stand.url}/webhooks")
        return "retrying" in page.locator("tr", has_text=failing.url).inner_text()
    wait_for(retrying, timeout=60, interval=1, what="the webhook's deliveries retrying")
    row = page.locator("tr", has_text=failing.url).inner_text()
    assert re.search(r"\d+ retrying", row), row
    shot(page, "webhooks-failing")
    clean(page)
    page.context.close()


def test_the_overview_shows_what_needs_attention_on_a_desk_and_a_phone(stand, deployed):
    page = stand.page()
    page.goto(stand.url + "/")
    assert page.title() == "Overview · Berth"
    attention = page.locator("#attention")
    assert "Nothing needs attention" in attention.inner_text()
    badge = page.locator(".project-card", has_text="Shop").locator("li", has_text="Staging")
    assert badge.locator(".status").inner_text() == "running"
    server = page.locator("tr", has_text="shop-server")
    assert server.locator("td[data-label=Reachable]").inner_text() == "yes"
    shot(page, "overview")
    # A webhook the platform paused is something to see to: the list says so within
    # its next refresh, without a reload (aria-live: a screen reader hears it).
    paused, _ = hook(stand.org, "https://hooks.example.com/paused", events=["deploy.started"])
    paused.is_active, paused.failure_count = False, 10
    paused.save()
    page.evaluate("() => htmx.trigger('#attention', 'every 30s')")
    page.locator("#attention li", has_text="hooks.example.com/paused").wait_for(timeout=35_000)
    assert page.locator("#attention [aria-live=polite]").count() == 1
    phone = stand.page(width=390, height=844)
    phone.goto(stand.url + "/")
    # Nothing wider than the screen: tables become cards, no word breaks mid-word.
    assert phone.evaluate("() => document.documentElement.scrollWidth") <= 390
    assert phone.locator("tr", has_text="shop-server").locator(
        "td[data-label=Reachable]").evaluate("e => getComputedStyle(e).display") == "block"
    shot(phone, "overview-phone")
    paused.delete_instance()
    for p in (page, phone):
        clean(p)
        p.context.close()


def _caught_mail(stand, deployed):
    """The staging ERP sends an invoice e-mail (the stand-in's /berth/send-mail, as Odoo
    sends): its server's catcher keeps it. Returns the mail's id, as the console lists it."""
    engine = docker.from_env()
    address = erp_address(engine, Environments(engine, root=stand.root)._names(
        str(deployed.id))["erp"])
    body = {"to": ["ada@customer.example"], "subject": "Invoice 2026/001",
            "body": "Dear Ada, your invoice is attached.",
            "html": "<p>Dear Ada, your <b>invoice</b> is attached.</p><script>alert(1)</script>",
            "attachments": [{"name": "INV_2026_001.pdf",
                             "content_base64": base64.b64encode(b"%PDF-1.4").decode()}]}
    request = urllib.request.Request(f"http://{address}/berth/send-mail", method="POST",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as answer:
        assert json.load(answer)["sent"] is True
    page = stand.page()
    page.goto(f"{stand.url}/environments/{deployed.id}/mails")
    link = page.get_by_role("link", name="Invoice 2026/001")
    mail_id = link.get_attribute("href").rsplit("/", 1)[1]
    page.context.close()
    return mail_id


def _every_page(stand, deployed):
    """(name, path) of each page of the console, a webhook's and a rule's included."""
    found, _ = hook(stand.org, "https://hooks.example.com/every-page", events=["deploy.started"])
    sent = Event.create(organization=stand.org, name="deploy.started", data={"task_id": "t"})
    WebhookDelivery.create(webhook=found, event=sent, status="failed", attempt_count=5,
                           response_status=500, response_body="<h1>down</h1>",
                           error_reason="HTTP 500", duration_ms=12, delivered_at=sent.created_at)
    channel = Webhook.create(organization=stand.org, channel="ntfy", url="https://ntfy.sh/berth",
                             options={"server": "https://ntfy.sh", "topic": "berth"},
                             events=["deploy.started"], secret_encrypted="sealed")
    WebhookDelivery.create(webhook=channel, event=sent, status="delivered", attempt_count=1,
                           response_status=200, duration_ms=9, delivered_at=sent.created_at)
    caught = _caught_mail(stand, deployed)
    rule = rules.create_rule(stand.project, name="nightly", trigger={
        "type": "schedule", "cron": "0 3 * * *", "timezone": "Europe/Brussels"},
        action={"type": "backup", "environment_id": str(deployed.id)})
    build = Build.create(
        organization=stand.org, project=stand.project.id, branch="feature/tax", commit="a" * 40,
        status="failed", stage="test", modules=["shop"], reason="1 failed, 0 error(s) of 2 tests",
        counts={"tests": 2, "passed": 1, "failed": 1, "error": 0, "skipped": 0},
        tests=[{"name": "TestOrder.test_tax", "module": "shop", "status": "failed",
                "seconds": 0.25, "failure": "Traceback (most recent call last):\n"
                                            "AssertionError: 0 != 21 : VAT missing"},
               {"name": "TestOrder.test_total", "module": "shop", "status": "passed",
                "seconds": 0.1, "failure": None}],
        log="2026-12-03 10:00:01,000 7 INFO odoo odoo.addons.shop.tests: Starting ...")
    return [("overview", "/"), ("projects", "/projects"),
            ("project", f"/projects/{stand.project.id}"),
            ("environment", f"/environments/{deployed.id}"), ("servers", "/servers"),
            ("server", f"/servers/{stand.server.id}"), ("webhooks", "/webhooks"),
            ("webhook", f"/webhooks/{found.id}"), ("channels", "/channels"),
            ("channel", f"/channels/{channel.id}"), ("keys", "/keys"), ("audit", "/audit"),
            ("mails", f"/environments/{deployed.id}/mails"),
            ("mail", f"/environments/{deployed.id}/mails/{caught}"),
            ("account", "/account"), ("rules", f"/projects/{stand.project.id}/rules"),
            ("rule", f"/rules/{rule.id}"),
            ("builds", f"/projects/{stand.project.id}/builds"),
            ("build", f"/builds/{build.id}")], (found, channel, rule, build)


def test_every_page_passes_axe_and_has_a_dark_mode(stand, deployed):
    """axe-core on each page of the console, in light and dark colours and on a
    phone: no violation. Each page's screenshot at 1280 px and at 390 px, where
    nothing is wider than the screen (tables are cards)."""
    pages, made = _every_page(stand, deployed)
    for scheme in ("light", "dark", "phone"):
        page = stand.page(width=390, height=844) if scheme == "phone" else stand.page()
        page.emulate_media(color_scheme="dark" if scheme == "dark" else "light")
        for name, path in pages:
            page.goto(stand.url + path)
            page.wait_for_load_state("networkidle")
            assert accessibility_violations(page) == [], (scheme, path)
            if scheme == "phone":
                shot(page, f"{name}-390")
                width = page.evaluate("() => document.documentElement.scrollWidth")
                assert width <= 390, (path, width)
                continue
            if name == "mail":  # the sender's HTML, shown in a frame where nothing runs
                shown = page.frame_locator('iframe[sandbox=""]').locator("b")
                assert shown.inner_text() == "invoice"
            if name == "webhook":  # a delivery opened: the body it sends, read then
                page.locator("ul.deliveries summary").first.click()
                sent = page.locator("ul.deliveries pre.log").first
                sent.wait_for()
                assert '"event": "deploy.started"' in sent.inner_text()
                assert accessibility_violations(page) == [], (scheme, path, "opened")
            if scheme == "light":  # the page again, warm: its assets come from the cache
                shot(page, f"{name}-1280")
                page.goto(stand.url + path)
                page.wait_for_load_state("networkidle")
                weight = page.evaluate(WEIGHT)
                assert 0 < weight["bytes"] <= 60 * 1024 and weight["assets"] == 0, (path, weight)
        background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert (background == "rgb(255, 255, 255)") == (scheme != "dark"), background
        if scheme == "dark":
            page.goto(stand.url + "/")
            shot(page, "overview-dark")
        # The caught mail's own script, refused by its frame's sandbox as it must be:
        # the one report a page may give.
        blocked = [p for p in page.problems if "about:srcdoc" in p and "sandboxed" in p]
        assert blocked, page.problems
        page.problems[:] = [p for p in page.problems if p not in blocked]
        clean(page)
        page.context.close()
    for row in made:
        row.delete_instance()


def test_an_unknown_address_is_a_page_of_the_console(stand):
    page = stand.page()
    answer = page.goto(f"{stand.url}/no-such-page")
    assert answer.status == 404 and page.title() == "Not found · Berth"
    # The one thing the browser reports is the page's own status: its stylesheet and
    # scripts loaded under the console's policy.
    assert [p for p in page.problems if "404" not in p] == [], page.problems
    assert len(page.problems) == 1
    page.problems.clear()
    assert page.evaluate("() => getComputedStyle(document.body).margin") == "0px"  # the CSS
    shot(page, "not-found")
    assert accessibility_violations(page) == [], "not-found"
    page.get_by_role("link", name="Go to the console's home page").click()
    page.wait_for_url(stand.url + "/")
    clean(page)
    page.context.close()


def test_pages_shown_once_and_refused_forms_pass_axe(stand):
    """The pages that show a secret once (a new key, a new webhook, an SSH server's
    key), a form shown again with its refusals beside their fields, and the error
    page: axe-core finds nothing, at 1280 and 390 px."""
    page = stand.page()
    made = []

    def check(name):
        assert page.locator("h1").count() == 1, name
        assert accessibility_violations(page) == [], name
        page.set_viewport_size({"width": 390, "height": 844})
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390, name
        assert accessibility_violations(page) == [], (name, 390)
        shot(page, f"{name}-390")
        page.set_viewport_size({"width": 1280, "height": 720})

    page.goto(stand.url + "/keys")
    page.locator("summary", has_text="New key").click()
    page.get_by_label("Name", exact=True).fill("axe")
    page.get_by_role("button", name="Create key").click()
    page.locator("h1", has_text="Key created").wait_for()
    check("key-created")
    made.append(ApiKey.get(ApiKey.name == "axe"))
    page.goto(stand.url + "/webhooks")
    page.locator("summary", has_text="New webhook").click()
    page.get_by_label("URL (https)").fill("https://hooks.example.com/axe")
    page.get_by_label("deploy.completed").check()
    page.get_by_role("button", name="Create webhook").click()
    page.locator("h1", has_text="Webhook created").wait_for()
    # Gone before any event is sent to it (no address beyond this machine is called).
    Webhook.get(Webhook.url == "https://hooks.example.com/axe").delete_instance(recursive=True)
    check("webhook-created")
    page.goto(stand.url + "/servers")
    page.locator("summary", has_text="Add a server reached over SSH").click()
    page.get_by_label("Server name").fill("axe-box")
    # Loopback: added, and never reached (the control plane refuses private addresses).
    page.get_by_label("Host name or IP address").fill("127.0.0.1")
    page.get_by_role("button", name="Add the server").click()
    page.locator("h1", has_text="axe-box is added").wait_for()
    check("server-ssh-added")
    made.append(Server.get(Server.name == "axe-box"))
    page.goto(stand.url + "/account")
    page.get_by_label("Current password").fill("not the password")
    page.get_by_label("New password").fill("a long enough new password")
    page.get_by_role("button", name="Change password").click()
    page.locator("#pw-current-err").wait_for()
    assert page.locator("#pw-current").get_attribute("aria-invalid") == "true"
    check("password-refused")
    answer = page.goto(f"{stand.url}/environments/{Project.get().id}")  # no such environment
    assert answer.status == 404 and page.locator("h1").inner_text() == "That was not done"
    page.problems.clear()  # the 404 the browser reports
    check("error")
    clean(page)
    page.context.close()
    for row in made[::-1]:
        row.delete_instance(recursive=True)


def test_a_server_is_added_from_a_phone_and_an_environment_configured_with_the_form(
        stand, deployed):
    """The install command for a new server, got and copied on a phone; then the
    environment's configuration changed through its form: a refused value said beside
    its field, the page kept, then saved and the environment redeployed with it."""
    phone = stand.page(width=390, height=844)
    phone.context.grant_permissions(["clipboard-read", "clipboard-write"])
    phone.goto(stand.url + "/servers")
    phone.locator("summary", has_text="Add a server").first.click()
    phone.get_by_label("Name (optional").fill("warehouse")
    phone.get_by_role("button", name="Get the install command").click()
    command = phone.locator("#install-command").inner_text()
    assert re.search(r"srt_live_\w+", command), command
    phone.get_by_role("button", name="Copy the command").click()
    phone.locator("[data-copied=install-command]", has_text="Copied.").wait_for()
    assert phone.evaluate("() => navigator.clipboard.readText()") == command
    assert phone.evaluate("() => document.documentElement.scrollWidth") <= 390
    shot(phone, "server-token-390")
    assert accessibility_violations(phone) == [], "server-token-390"
    phone.goto(stand.url + "/servers")
    assert "warehouse" in phone.locator("#tokens-h + table").inner_text()
    clean(phone)
    phone.context.close()

    page = stand.page()
    page.goto(f"{stand.url}/environments/{deployed.id}")
    tasks = page.locator("#tasks tbody tr").count()
    page.get_by_label("New variable 1: name").fill("SHOP_MODE")
    page.get_by_label("New variable 1: value").fill("b2b")
    page.locator("summary", has_text="ERP options").click()
    page.get_by_label("limit_time_real", exact=True).fill("lots")
    page.get_by_role("button", name="Save and redeploy").click()
    error = page.locator("#erp_options-limit_time_real-err")
    error.wait_for()
    # The page's own status is the one thing the browser reports: the form refused.
    assert len(page.problems) == 1 and "422" in page.problems[0], page.problems
    page.problems.clear()
    assert page.get_by_label("New variable 1: value").input_value() == "b2b"  # kept
    page.get_by_label("limit_time_real", exact=True).fill("120")
    page.get_by_role("button", name="Save and redeploy").click()
    page.locator("#config-h ~ p.done", has_text="redeployed").wait_for()
    page.locator("#tasks tbody tr").nth(tasks).wait_for(timeout=30_000)
    page.locator("#tasks tbody tr").first.locator(".status", has_text="completed").wait_for(
        timeout=120_000)
    assert page.get_by_label("Value of SHOP_MODE").input_value() == "b2b"
    assert page.get_by_label("limit_time_real", exact=True).input_value() == "120"
    shot(page, "environment-configured")
    clean(page)
    page.context.close()
