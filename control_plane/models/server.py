import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.org import Organization, User
from control_plane.vocabulary.states import Connection, TokenStatus, UpgradeStatus


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
    # states.Connection. A server reached over SSH (gateway/ssh/): where, as whom,
    # and its host key, pinned at first contact (an OpenSSH public key line); a
    # different key it offered later waits in ssh_offered_host_key for an operator.
    connection = peewee.CharField(max_length=8, default=Connection.AGENT)
    ssh_host = peewee.CharField(max_length=255, null=True)
    ssh_port = peewee.IntegerField(null=True)
    ssh_username = peewee.CharField(max_length=64, null=True)
    ssh_host_key = peewee.TextField(null=True)
    ssh_offered_host_key = peewee.TextField(null=True)
    # The last SSH check: when, and since when the server has not answered; and the
    # scheduler's claim on the next one (several schedulers check each server once).
    ssh_checked_at = DateTimeField(null=True)
    ssh_claimed_at = DateTimeField(null=True)
    unreachable_since = DateTimeField(null=True)
    ssh_error = peewee.CharField(max_length=500, null=True)
    # Fleet alerts (services/servers/alerts.py): since when a figure has been past
    # its critical threshold (null: not now), and whether its event went out; and
    # whether `server.unreachable` went out (until `server.recovered`).
    disk_critical_since = DateTimeField(null=True)
    disk_alerted = peewee.BooleanField(default=False)
    memory_critical_since = DateTimeField(null=True)
    memory_alerted = peewee.BooleanField(default=False)
    down_alerted = peewee.BooleanField(default=False)

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


class OrgSshKey(BaseModel):
    """The key the control plane signs in with on an organization's SSH servers:
    ed25519, made once; the private half sealed (secretbox), the public half shown."""
    organization = peewee.ForeignKeyField(Organization, unique=True)
    public_key = peewee.TextField()
    private_key_sealed = peewee.TextField()


class AgentUpgrade(BaseModel):
    """One request to move a server's resident agent to `to_version` (the control
    plane's); `command` is the agent command that carries it once sent."""
    server = peewee.ForeignKeyField(Server, backref="upgrades", on_delete="CASCADE")
    to_version = peewee.CharField(max_length=32)
    from_version = peewee.CharField(max_length=32, null=True)
    status = peewee.CharField(max_length=16, default=UpgradeStatus.QUEUED, index=True)
    command = peewee.UUIDField(null=True)
    error = peewee.CharField(max_length=500, null=True)
    sent_at = DateTimeField(null=True)
    finished_at = DateTimeField(null=True)
