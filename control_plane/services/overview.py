"""What an organization's fleet looks like now, for the console's first page: what
needs attention first (failed or looping environments, unreachable servers and
their critical figures, agents behind the control plane, backups, drills and WAL
archiving whose last attempt failed, paused webhooks), then every project with its
environments' status, the servers with their last stored figures, and the latest
audit events.

A fixed number of queries whatever the fleet's size (each "last attempt" is one
grouped query over the organization's environments, infra.newest), so the page stays fast at
a thousand environments (benchmarks/console.py)."""

import datetime as dt
import uuid
from collections import defaultdict

from control_plane.infra import clock
from control_plane.infra.newest import newest_rows
from control_plane.models import (
    AuditEvent,
    Backup,
    Deployment,
    Environment,
    Project,
    Webhook,
)
from control_plane.models.metrics import ServerMetric
from control_plane.services import agents
from control_plane.services.accounts.scope import projects_for
from control_plane.services.deploys.environments import address
from control_plane.services.servers import history
from control_plane.services.servers import servers as server_svc
from control_plane.services.webhooks.delivery import PAUSE_AFTER
from control_plane.vocabulary import states
from protocol.kinds import TaskKind

FIGURES_WITHIN = dt.timedelta(minutes=10)  # older stored figures are not shown as now
LOOKBACK = dt.timedelta(days=8)  # the last backup or drill looked at: a week and a day
RECENT = 10  # audit events shown
# The page's size is bounded: the projects with a failed environment first, each with
# its failed environments first; the lists link to the whole.
PROJECTS_SHOWN, ENVS_SHOWN, SERVERS_SHOWN = 30, 8, 30
FAILED = (states.EnvironmentStatus.FAILED, states.EnvironmentStatus.ERROR)
CRITICAL, WARNING = "critical", "warning"


def overview(actor, apps_domain):
    """{attention, projects, servers, recent, counts} as the overview page shows them."""
    envs = _environments(actor, apps_domain)
    servers = fleet(actor, envs)
    attention = _attention(actor, envs, servers)
    projects = {p: {"id": p, "name": n, "environments": [], "more": 0, "troubled": False}
                for p, n in projects_for(actor).select(Project.id, Project.name)
                .order_by(Project.name).tuples()}
    for env in envs:
        if (project := projects.get(env["project_id"])) is not None:
            project["environments"].append(env)
    for project in projects.values():  # a page of bounded size, whatever the fleet's
        listed = sorted(project["environments"], key=lambda e: e["status"] not in FAILED)
        project["troubled"] = bool(listed) and listed[0]["status"] in FAILED
        project["environments"], project["more"] = (listed[:ENVS_SHOWN],
                                                    max(0, len(listed) - ENVS_SHOWN))
    shown = sorted(projects.values(), key=lambda p: not p["troubled"])[:PROJECTS_SHOWN]
    counts = defaultdict(int)
    for env in envs:
        counts[env["status"]] += 1
    return {"attention": attention, "projects": shown, "projects_total": len(projects),
            "servers": sorted(servers, key=lambda s: s["reachable"] and not s["alerts"])
            [:SERVERS_SHOWN], "servers_total": len(servers),
            "recent": _recent(actor), "counts": dict(counts), "environments": len(envs)}


def attention(actor, apps_domain):
    """What needs attention alone (the overview polls it): no projects, no activity."""
    envs = _environments(actor, apps_domain)
    return _attention(actor, envs, fleet(actor, envs))


def _attention(actor, envs, servers):
    """The attention items, critical first, then the newest."""
    found = (_environment_items(envs) + _server_items(servers)
             + _last_failed({e["id"]: e for e in envs}, actor) + _webhook_items(actor))
    found.sort(key=lambda a: (a["severity"] != CRITICAL, a["since"] is None,
                              -(a["since"].timestamp() if a["since"] else 0)))
    return found


def badges(actor, project_ids, apps_domain):
    """Each listed project's environments (name, status, URL), for the projects list."""
    found = defaultdict(list)
    for env in _environments(actor, apps_domain, project_ids):
        found[env["project_id"]].append(env)
    return found


def _environments(actor, apps_domain, project_ids=None):
    query = (Environment.select(Environment.id, Environment.name, Environment.status,
                                Environment.environment_type, Environment.server,
                                Project.id, Project.name, Environment.custom_domain,
                                Environment.custom_domain_verified,
                                Environment.crash_loop_since, Environment.wal_alerted_at,
                                Environment.updated_at)
             .join(Project).where(Environment.is_active, _visible(actor))
             .order_by(Project.name, Environment.name))
    if project_ids is not None:
        query = query.where(Environment.project.in_(list(project_ids)))
    return [{"id": env_id, "name": name, "project_id": project_id, "project_name": project,
             "type": kind, "status": states.public_environment_status(status),
             "server_id": server_id, "crash_loop_since": looping, "wal_alerted_at": wal,
             "updated_at": updated, "url": address(env_id, domain, verified, apps_domain)}
            for (env_id, name, status, kind, server_id, project_id, project, domain, verified,
                 looping, wal, updated) in query.tuples()]


def _visible(actor):
    """The actor's projects' environments (a condition on Environment)."""
    return Environment.project.in_(projects_for(actor).select(Project.id))


def with_figures(rows):
    """Rows of the servers list with `reachable`, `behind`, `figures` and `alerts`."""
    ids = [uuid.UUID(str(r["id"])) for r in rows]  # a page of the list holds them as text
    figures = latest_figures(ids)
    for key, row in zip(ids, rows, strict=True):
        row["reachable"] = server_svc.reachable(row)
        row["behind"] = agents.behind(row["agent_version"])
        row["figures"] = figures.get(key)
        row["alerts"] = [name for name in ("disk", "memory")
                         if row[f"{name}_critical_since"] is not None]
    return rows


def fleet(actor, envs):
    """The organization's servers, and the shared ones its environments (`envs`) are
    on, as the servers list shows them (with `environment_count`, counted from `envs`),
    each with `reachable`, `behind`, its last stored figures (`figures`: None when none
    within FIGURES_WITHIN) and its critical `alerts`."""
    counts = defaultdict(int)
    for env in envs:
        counts[env["server_id"]] += 1
    rows = [{**r, "environment_count": counts[r["id"]]} for r in server_svc.fleet_rows(actor)]
    return with_figures([r for r in rows if r["organization"] is not None
                         or r["environment_count"]])


def latest_figures(server_ids):
    """{server id: {cpu_percent, memory_percent, disk_percent, at}}: the newest stored
    minute of each, within FIGURES_WITHIN."""
    if not server_ids:
        return {}
    since = history.unix(clock.now() - FIGURES_WITHIN)
    M = ServerMetric
    rows = newest_rows(M, M.server_id, M.at, lambda m: m.step == 60, lambda m: m.at >= since,
                       lambda m: m.server_id.in_(list(server_ids)),
                       fields=(M.server_id, M.at, M.cpu_percent, M.memory_percent,
                               M.disk_percent))
    return {r.server_id: {"cpu_percent": r.cpu_percent, "memory_percent": r.memory_percent,
                          "disk_percent": r.disk_percent,
                          "at": dt.datetime.fromtimestamp(r.at, dt.UTC).replace(tzinfo=None)}
            for r in rows}


def _item(severity, kind, text, since=None, environment=None, server=None):
    return {"severity": severity, "kind": kind, "text": text, "since": since,
            "environment": environment, "server_id": server and server["id"],
            "server_name": server and server["name"]}


def _environment_items(envs):
    items = []
    errors = _last_errors([e["id"] for e in envs if e["status"] in FAILED])
    for env in envs:
        if env["status"] in FAILED:
            kind, error = errors.get(env["id"], ("task", None))
            items.append(_item(CRITICAL, "environment", f"{env['status']}: its last {kind} "
                               f"did not complete{': ' + error[:200] if error else ''}",
                               env["updated_at"], environment=env))
        if env["crash_loop_since"]:
            items.append(_item(CRITICAL, "environment", "a container restarts in a loop",
                               env["crash_loop_since"], environment=env))
        if env["wal_alerted_at"]:
            items.append(_item(CRITICAL, "backup", "WAL archiving is failing",
                               env["wal_alerted_at"], environment=env))
    return items


def _last_errors(env_ids):
    """{environment id: (kind, error message)} of each one's newest task."""
    if not env_ids:
        return {}
    D = Deployment
    rows = newest_rows(D, D.environment, D.created_at, lambda d: d.environment.in_(env_ids),
                       fields=(D.environment, D.kind, D.error_message))
    return {env_id: (kind, error) for env_id, kind, error in rows.tuples()}


def _server_items(servers):
    items = []
    for s in servers:
        if not s["reachable"] and (s["last_seen_at"] or s["unreachable_since"]):
            items.append(_item(CRITICAL, "server", "cannot be reached",
                               s["unreachable_since"] or s["last_seen_at"], server=s))
        for name in s["alerts"]:
            items.append(_item(CRITICAL, "server", f"{name} use is critical",
                               s[f"{name}_critical_since"], server=s))
        if s["behind"]:
            items.append(_item(WARNING, "server", f"its agent ({s['agent_version']}) is behind "
                                                  "the control plane", server=s))
    return items


def _last_failed(envs, actor):
    """Environments whose last backup, or last restore drill, failed (within LOOKBACK)."""
    if not envs:
        return []
    since, items = clock.now() - LOOKBACK, []
    D = states.DeploymentStatus
    visible = Environment.select(Environment.id).join(Project).where(Environment.is_active,
                                                                       _visible(actor))
    for model, kind, text, where in (
            (Backup, "backup", "its last backup failed",
             (lambda m: m.status.in_(("completed", "failed")),
              lambda m: m.deleted_at.is_null())),
            (Deployment, "drill", "its last restore drill failed",
             (lambda m: m.kind == TaskKind.DRILL,
              lambda m: m.status.in_((D.SUCCESS, D.FAILED))))):
        failed = newest_rows(model, model.environment, model.created_at, *where,
                             lambda m: m.created_at >= since,
                             lambda m: m.environment.in_(visible),
                             fields=(model.environment, model.created_at, model.error_message)
                             ).where(model.status == "failed")
        seen = set()
        for env_id, at, error in failed.tuples():
            if env_id in seen or env_id not in envs:  # two of the same moment: one item
                continue
            seen.add(env_id)
            reason = f": {error[:200]}" if error else ""
            items.append(_item(CRITICAL if kind == "backup" else WARNING, kind, text + reason,
                               at, environment=envs[env_id]))
    return items


def _webhook_items(actor):
    """Paused webhooks and notification channels (both pause after PAUSE_AFTER)."""
    paused = (Webhook.select(Webhook.id, Webhook.url, Webhook.channel, Webhook.updated_at)
              .where(Webhook.organization == actor.organization_id, ~Webhook.is_active,
                     Webhook.failure_count >= PAUSE_AFTER))
    return [{**_item(WARNING, "channel" if w.channel else "webhook",
                     f"the {w.channel + ' channel' if w.channel else 'webhook'} to {w.url} is "
                     f"paused after {PAUSE_AFTER} failed deliveries", w.updated_at),
             "webhook_id": w.id} for w in paused]


def _recent(actor):
    return list(AuditEvent.select(AuditEvent.created_at, AuditEvent.actor_type,
                                  AuditEvent.actor_name, AuditEvent.action,
                                  AuditEvent.target_type, AuditEvent.target_id)
                .where(AuditEvent.organization == actor.organization_id)
                .order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc())
                .limit(RECENT).dicts())
