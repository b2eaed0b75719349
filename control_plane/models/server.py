import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.org import Organization, User
from control_plane.states import TokenStatus


class Server(BaseModel):
    # organization is null for shared (platform-provided) servers.
    organization = peewee.ForeignKeyField(Organization, null=True, backref="servers")
    name = peewee.CharField(max_length=255)
    provider = peewee.CharField(max_length=64)
    region = peewee.CharField(max_length=64, null=True)
    cpu_cores = peewee.IntegerField()
    ram_mb = peewee.IntegerField()
    disk_gb = peewee.IntegerField()
    hostname = peewee.CharField(max_length=255, null=True)
    agent_credential_hash = peewee.CharField(max_length=64, null=True, unique=True)
    agent_version = peewee.CharField(max_length=32, null=True)
    connected_since = DateTimeField(null=True)
    last_seen_at = DateTimeField(null=True)
    # The reverse proxy as the agent last reported it (monitoring.record_proxy).
    proxy_state = JSONField(null=True)
    deleted_at = DateTimeField(null=True)

    @property
    def shared(self):
        return self.organization_id is None


class RegistrationToken(BaseModel):
    organization = peewee.ForeignKeyField(Organization, backref="registration_tokens")
    token_hash = peewee.CharField(max_length=64, unique=True)
    token_prefix = peewee.CharField(max_length=24)
    server_name = peewee.CharField(max_length=255, null=True)
    ssh_username = peewee.CharField(max_length=64, default="root")
    auto_deploy = JSONField(null=True)
    # states.TokenStatus; "expired" is derived from expires_at.
    status = peewee.CharField(max_length=16, default=TokenStatus.PENDING)
    expires_at = DateTimeField()
    created_by = peewee.ForeignKeyField(User, null=True)
    created_by_name = peewee.CharField(max_length=255)
    server = peewee.ForeignKeyField(Server, null=True)
    consumed_at = DateTimeField(null=True)
    revoked_at = DateTimeField(null=True)
