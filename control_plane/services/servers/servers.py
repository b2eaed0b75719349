"""Servers: the organization's own (brought by the customer) plus shared ones."""

from peewee import fn

from control_plane.infra.db import database
from control_plane.infra.pagination import CursorList
from control_plane.models import Environment, Organization, Project, Server
from control_plane.services import agents
from control_plane.services.accounts.scope import scoped_page
from control_plane.vocabulary.errors import ApiError, NotFound
from control_plane.vocabulary.states import Connection


def _seen_by(org):
    """The servers an organization sees: its own and the shared ones, not deleted."""
    return Server.deleted_at.is_null() & ((Server.organization == org)
                                          | Server.organization.is_null())


def _listed(org, *project, shape):
    """Own and shared servers, each with the caller's active environments on it
    (a shared server does not reveal other customers' usage). A project-scoped
    key sees only the servers hosting its project, and only its environments."""
    own_envs = (Environment.select(fn.COUNT(Environment.id)).join(Project)
                .where(Environment.server == Server.id, Environment.is_active,
                       Project.organization == org, Project.deleted_at.is_null()))
    if shape == ("project",):
        own_envs = own_envs.where(Environment.project == project[0])
    query = Server.select(Server.id, Server.name, Server.provider, Server.region, Server.cpu_cores,
                          Server.ram_mb, Server.disk_gb, Server.created_at,
                          Server.connected_since, Server.last_seen_at, Server.connection,
                          Server.agent_version, Server.ssh_host, Server.ssh_port,
                          Server.ssh_username, Server.ssh_host_key, Server.ssh_offered_host_key,
                          Server.ssh_checked_at, Server.unreachable_since, Server.ssh_error,
                          Server.disk_critical_since, Server.memory_critical_since,
                          own_envs.alias("environment_count")).where(_seen_by(org))
    if shape == ("project",):
        hosting = (Environment.select(Environment.server)
                   .where(Environment.project == project[0], Environment.is_active,
                          Environment.server.is_null(False)))
        project_server = Project.select(Project.server).where(Project.id == project[0])
        query = query.where(Server.id.in_(hosting) | Server.id.in_(project_server))
    return query


SERVERS = CursorList("servers", Server, _listed, newest_first=False)


def reachable(row):
    """A listed server (a row of `_listed`): agent, its stream held now; SSH, its last
    check answered."""
    if row["connection"] == Connection.SSH:
        return agents.ssh_reachable(row["ssh_checked_at"], row["unreachable_since"],
                                    row["ssh_offered_host_key"])
    return agents.connected(row["connected_since"], row["last_seen_at"])


def fleet_rows(actor):
    """Every server the organization sees, owned or shared (no page: the console's
    overview counts their environments itself), with the list's fields, its owner and
    since when its critical figures hold."""
    return list(Server.select(
        Server.id, Server.name, Server.organization, Server.connection, Server.agent_version,
        Server.connected_since, Server.last_seen_at, Server.ssh_checked_at,
        Server.unreachable_since, Server.ssh_offered_host_key, Server.disk_critical_since,
        Server.memory_critical_since).where(_seen_by(actor.organization_id))
        .order_by(Server.name).dicts())


def list_servers(actor, *, limit, cursor):
    return scoped_page(SERVERS, actor, limit=limit, cursor=cursor)


def one(actor, server_id):
    """One server as the list shows it (an organization-scoped key's view)."""
    return (_listed(actor.organization_id, shape=()).where(Server.id == server_id)
            .dicts().get())


def create_server(*, name, provider, cpu_cores, ram_mb, disk_gb, region=None, org_id=None):
    """Operator command: a server for one organization, or shared (org_id None)."""
    for label, value in (("cpu-cores", cpu_cores), ("ram-mb", ram_mb), ("disk-gb", disk_gb)):
        if value < 1:
            raise ApiError(f"--{label} must be at least 1")
    with database.atomic():
        if org_id is not None and Organization.get_or_none(Organization.id == org_id) is None:
            raise NotFound("organization not found")
        return Server.create(organization=org_id, name=name, provider=provider, region=region,
                             cpu_cores=cpu_cores, ram_mb=ram_mb, disk_gb=disk_gb)
