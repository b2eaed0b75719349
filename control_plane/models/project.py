import peewee

from control_plane.models.base import BaseModel, DateTimeField
from control_plane.models.org import Organization
from control_plane.models.server import Server

# The ERP version of a project that names none: its images' and its backups'.
DEFAULT_ERP_VERSION = "17.0"


class Project(BaseModel):
    organization = peewee.ForeignKeyField(Organization, backref="projects")
    name = peewee.CharField(max_length=255)
    erp_version = peewee.CharField(max_length=32, null=True)
    git_repo_url = peewee.CharField(max_length=2048, null=True)
    default_branch = peewee.CharField(max_length=255, null=True)
    server = peewee.ForeignKeyField(Server, null=True, backref="projects")
    updated_at = DateTimeField(null=True)
    deleted_at = DateTimeField(null=True, index=True)  # soft delete

    @property
    def effective_erp_version(self):
        return self.erp_version or DEFAULT_ERP_VERSION

    class Meta:
        # The projects list: an organization's active projects in list order
        # (migration 0003).
        indexes = ((("organization", "deleted_at", "created_at", "id"), False),)
