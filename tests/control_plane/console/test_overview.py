"""The console's first page, on both databases: what needs attention (a failed
environment with its error, a looping container, failing WAL archiving, an
unreachable server, critical disk, an agent behind, a last backup and a last
drill that failed, a paused webhook), and only what does; every project with its
environments' status badges; the servers with their last stored figures; the
latest audit events; another organization's fleet never shown. The projects and
servers lists carry the same badges and figures."""

import datetime as dt
import re

from control_plane.infra import clock
from control_plane.models import (
    AuditEvent,
    Backup,
    Deployment,
    Environment,
    Server,
    Webhook,
)
from control_plane.models.metrics import ServerMetric
from control_plane.services.servers import history
from control_plane.services.webhooks.delivery import PAUSE_AFTER
from tests.control_plane.console.test_console import Browser, _text, _user


def _attention(page):
    """Each attention item's text, whitespace folded."""
    block = re.search(r'<div id="attention".*?</div>', page, re.S).group(0)
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", li)).strip()
            for li in re.findall(r"<li.*?</li>", block, re.S)]


def _signed_in(app, world, org):
    b = Browser(app)
    assert b.sign_in(_user(world, org).email).status_code == 303
    return b


def test_a_quiet_fleet_needs_no_attention_and_shows_its_projects(app, world):
    org = world.org()
    project = world.project(org, name="Shop")
    env = world.environment(project)
    world.project(org, server=project.server, name="Empty")
    b = _signed_in(app, world, org)
    r = b.get("/")
    page = _text(r)
    assert r.status_code == 200 and "<title>Overview · Berth</title>" in page
    assert _attention(page) == [] and "Nothing needs attention" in page
    assert f'href="/environments/{env.id}">{env.name}</a>' in page
    assert '<span class="status s-running">running</span>' in page
    assert f"https://{env.id.hex[:12]}." in page  # its address
    assert "No environments yet." in page  # the empty project is listed too
    assert "1 environment: " in page and "1 running" in page


def test_what_needs_attention_is_listed_critical_first(app, world, fake_clock):
    org = world.org()
    server = world.server(org, name="edge-1")
    project = world.project(org, server=server, name="Shop")
    broken = world.environment(project, status="failed")
    Deployment.create(environment=broken, project=project, kind="deploy", trigger="manual",
                      status="failed", error_message="the module update failed: shop_sale")
    looping = world.environment(project)
    looping.crash_loop_since = clock.now()
    looping.wal_alerted_at = clock.now()
    looping.save()
    quiet = world.environment(project)
    # The quiet one's backup failed once, then worked: not listed. The looping one's
    # last backup failed, and so did its last drill.
    for env, statuses in ((quiet, ("failed", "completed")), (looping, ("completed", "failed"))):
        for status in statuses:
            fake_clock.advance(seconds=1)
            Backup.create(environment=env, status=status, error_message="bucket refused")
    fake_clock.advance(seconds=1)
    Deployment.create(environment=looping, project=project, kind="drill", trigger="scheduled",
                      status="failed", error_message="the copy did not answer")
    # The server was heard from, then not; its disk is critical; its agent is old.
    Server.update(last_seen_at=clock.now() - dt.timedelta(minutes=10),
                  connected_since=clock.now() - dt.timedelta(hours=1),
                  disk_critical_since=clock.now(), agent_version="0.0.1").where(
        Server.id == server.id).execute()
    Webhook.create(organization=org, url="https://hooks.example.com/in", secret_encrypted="x",
                   is_active=False, failure_count=PAUSE_AFTER)
    Webhook.create(organization=org, url="https://hooks.example.com/off", secret_encrypted="x",
                   is_active=False)  # turned off by a person: not an alert
    # Another organization's trouble is not this one's.
    other = world.project(world.org(), name="Theirs")
    world.environment(other, status="failed")
    items = _attention(_text(_signed_in(app, world, org).get("/")))
    critical = [i for i in items if i.startswith("critical")]
    assert items[:len(critical)] == critical  # critical first
    expected = [
        f"{broken.name} (Shop): failed: its last deploy did not complete: the module "
        "update failed: shop_sale",
        f"{looping.name} (Shop): a container restarts in a loop",
        f"{looping.name} (Shop): WAL archiving is failing",
        f"{looping.name} (Shop): its last backup failed: bucket refused",
        f"{looping.name} (Shop): its last restore drill failed: the copy did not answer",
        "edge-1: cannot be reached", "edge-1: disk use is critical",
        "edge-1: its agent (0.0.1) is behind the control plane",
        "Webhooks: the webhook to https://hooks.example.com/in is paused after "
        f"{PAUSE_AFTER} failed deliveries"]
    for text in expected:
        assert sum(text in item for item in items) == 1, (text, items)
    assert len(items) == len(expected), items
    assert not any("Theirs" in i or quiet.name in i for i in items)


def test_servers_show_their_last_figures_and_the_lists_carry_badges(app, world):
    org = world.org()
    server = world.server(org, name="edge-1")
    project = world.project(org, server=server, name="Shop")
    env = world.environment(project, status="stopped")
    now = history.minute_now()
    for at, cpu in ((now - 120, 10.0), (now - 60, 37.4)):
        ServerMetric.insert(step=60, at=at, n=1, server_id=server.id, cpu_percent=cpu,
                            memory_percent=52.0, disk_percent=91.0).execute()
    b = _signed_in(app, world, org)
    for path in ("/", "/servers"):
        page = _text(b.get(path))
        row = re.search(rf'<tr><td data-label="Name"><a href="/servers/{server.id}".*?</tr>',
                        page, re.S).group(0)
        cells = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", c)).strip()
                 for c in re.findall(r"<td.*?</td>", row, re.S)]
        assert cells[2:5] == ["37 %", "52 %", "91 %"], (path, cells)  # the newest minute
    page = _text(b.get("/projects"))
    assert f'<a href="/environments/{env.id}">{env.name}</a> ' \
           '<span class="status s-stopped">stopped</span>' in page
    # Figures older than a few minutes are not shown as now.
    ServerMetric.update(at=ServerMetric.at - 3600).execute()
    page = _text(b.get("/servers"))
    assert "37 %" not in page


def test_recent_activity_is_the_organizations_own(app, world):
    org, other = world.org(), world.org()
    for o, action in ((org, "project.update"), (other, "project.delete")):
        AuditEvent.create(organization=o, actor_type="user", actor_name="ada@example.com",
                          action=action, target_type="project")
    page = _text(_signed_in(app, world, org).get("/"))
    assert "<code>project.update</code>" in page and "project.delete" not in page


def test_signing_in_lands_on_the_overview(app, world):
    user = _user(world, world.org())
    r = Browser(app).sign_in(user.email)
    assert r.status_code == 303 and r.headers["Location"] == "/"


def _statements(db, call):
    """How many SQL statements `call()` runs (it must answer 200)."""
    statements, original = [], db.execute_sql

    def counting(sql, *args, **kw):
        statements.append(sql)
        return original(sql, *args, **kw)
    db.execute_sql = counting
    try:
        assert call().status_code == 200
    finally:
        db.execute_sql = original
    return len(statements)


def test_a_thousand_environments_are_one_page_in_a_fixed_number_of_queries(app, world):
    """The overview's statements do not grow with the fleet (benchmarks/console.py
    times it): the same count for 3 environments as for 60."""
    org = world.org()
    b = _signed_in(app, world, org)
    db = app.extensions["berth"].db
    counts = []
    for n in (3, 60):
        project = world.project(org)
        for _ in range(n - (3 if counts else 0)):
            world.environment(project, status="failed")
        counts.append(_statements(db, lambda: b.get("/")))
    assert counts[0] == counts[1], counts
    assert Environment.select().count() >= 60


def test_the_polled_panels_answer_again_only_when_what_they_show_changed(app, world):
    """The attention list and an environment's status panel (both aria-live) are
    polled with the digest of what the page shows: unchanged, the answer is 204 and
    htmx keeps the panel, so a screen reader is not read it again every poll."""
    org = world.org()
    env = world.environment(world.project(org))
    b = _signed_in(app, world, org)

    def poll_url(page, panel):
        found = re.search(rf'<div id="{panel}"[^>]* hx-get="([^"]+)"', page)
        return found.group(1).replace("&amp;", "&")

    for page_path, panel in (("/", "attention"), (f"/environments/{env.id}", "status")):
        url = poll_url(_text(b.get(page_path)), panel)
        assert "seen=" in url and b.get(url).status_code == 204, (panel, url)
        Environment.update(status="failed").where(Environment.id == env.id).execute()
        changed = b.get(url)
        assert changed.status_code == 200 and "failed" in _text(changed), panel
        again = poll_url(_text(changed), panel)
        assert again != url and b.get(again).status_code == 204, panel
        Environment.update(status="running").where(Environment.id == env.id).execute()
