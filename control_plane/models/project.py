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
    # Where builds report commit statuses (services/webhooks/commit_statuses.py):
    # github, gitlab or gitea; its API's base URL; a token, sealed, never shown again.
    forge_provider = peewee.CharField(max_length=16, null=True)
    forge_api_url = peewee.CharField(max_length=512, null=True)
    forge_token = peewee.TextField(null=True)

    @property
    def effective_erp_version(self):
        return self.erp_version or DEFAULT_ERP_VERSION

    class Meta:
        # The projects list: an organization's active projects in list order
        # (migration 0003).
        indexes = ((("organization", "deleted_at", "created_at", "id"), False),)


FORGE_TOKEN_PURPOSE = "forge-token"  # Project.forge_token's secretbox purpose
# The forges builds report to, and each one's public API (a self-hosted one names its own).
FORGE_DEFAULT_API = {"github": "https://api.github.com", "gitlab": "https://gitlab.com/api/v4",
                     "gitea": "https://codeberg.org/api/v1"}
