"""Servers: the organization's own (brought by the customer) plus shared ones."""

from peewee import fn

from control_plane.db import database
from control_plane.errors import ApiError, NotFound
from control_plane.models import Environment, Organization, Project, Server


def visible_servers(key):
    """Own and shared servers; a project-scoped key sees only those hosting its project."""
    query = Server.select().where(
        Server.deleted_at.is_null()
        & ((Server.organization == key.organization_id) | Server.organization.is_null()))
    if key.project_scoped:
        hosting = (Environment.select(Environment.server)
                   .where(Environment.project == key.project_id, Environment.is_active,
                          Environment.server.is_null(False)))
        project_server = Project.select(Project.server).where(Project.id == key.project_id)
        query = query.where(Server.id.in_(hosting) | Server.id.in_(project_server))
    return query


def with_counts(key, servers):
    """Active environments per server, counting only the key's organization's
    (a shared server does not reveal other customers' usage)."""
    ids = [s.id for s in servers]
    counts = {}
    if ids:
        counts = dict(
            Environment.select(Environment.server, fn.COUNT(Environment.id))
            .join(Project)
            .where(Environment.server.in_(ids), Environment.is_active,
                   Project.organization == key.organization_id, Project.deleted_at.is_null())
            .group_by(Environment.server).tuples())
    for s in servers:
        s.environment_count = counts.get(s.id, 0)
    return servers


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
