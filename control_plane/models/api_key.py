import peewee

from control_plane.models.base import BaseModel, DateTimeField
from control_plane.models.org import Organization, User
from control_plane.models.project import Project

READ_ONLY, FULL_ACCESS = "read_only", "full_access"
ORG_SCOPE, PROJECT_SCOPE = "organization", "project"
KEY_PREFIX = {READ_ONLY: "svc_live_ro_", FULL_ACCESS: "svc_live_rw_"}


class ApiKey(BaseModel):
    public_id = peewee.CharField(max_length=32, unique=True)  # "key_…", sent as X-API-Key-Id
    organization = peewee.ForeignKeyField(Organization, backref="api_keys")
    name = peewee.CharField(max_length=255)
    key_type = peewee.CharField(max_length=16)
    scope = peewee.CharField(max_length=16)
    project = peewee.ForeignKeyField(Project, null=True, backref="api_keys")
    prefix = peewee.CharField(max_length=32)  # shown in lists, never the whole key
    key_hash = peewee.CharField(max_length=64, unique=True)
    server_registration = peewee.BooleanField(default=False)
    support_tickets = peewee.BooleanField(default=False)
    owner = peewee.ForeignKeyField(User, null=True, backref="api_keys")
    expires_at = DateTimeField(null=True)
    revoked_at = DateTimeField(null=True)
    deleted_at = DateTimeField(null=True)

    @property
    def read_only(self):
        return self.key_type == READ_ONLY

    @property
    def project_scoped(self):
        return self.scope == PROJECT_SCOPE
