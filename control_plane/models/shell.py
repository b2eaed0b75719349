import peewee

from control_plane.models.base import BaseModel, DateTimeField, JSONField
from control_plane.models.environment import Environment
from control_plane.models.org import Organization


class ShellSession(BaseModel):
    """A shell into an environment's ERP container (services/servers/shells.py): who
    opened it, what ran, when it started and ended and with which exit code, and,
    when transcripts are on, what it showed. Kept as long as the audit log."""

    organization = peewee.ForeignKeyField(Organization, on_delete="CASCADE", index=False)
    environment = peewee.ForeignKeyField(Environment, on_delete="CASCADE", index=False)
    server_id = peewee.UUIDField()
    actor_type = peewee.CharField(max_length=16)  # api_key | user
    actor_id = peewee.CharField(max_length=64, null=True)
    actor_name = peewee.CharField(max_length=255, null=True)
    source_ip = peewee.CharField(max_length=64, null=True)
    odoo = peewee.BooleanField(default=False)
    command = JSONField(null=True)  # argv, or null: an interactive shell
    tty = peewee.BooleanField(default=True)
    # The stream's single-use ticket (a SHA-256 digest), cleared once it is used.
    ticket_hash = peewee.CharField(max_length=64, null=True, unique=True)
    expires_at = DateTimeField()  # the ticket's
    started_at = DateTimeField(null=True)
    seen_at = DateTimeField(null=True)  # the stream's holder says it is alive
    ended_at = DateTimeField(null=True)
    exit_code = peewee.IntegerField(null=True)
    end_reason = peewee.CharField(max_length=32, null=True)
    transcript = peewee.TextField(null=True)
    transcript_truncated = peewee.BooleanField(default=False)

    class Meta:
        table_name = "shell_session"
        indexes = ((("environment", "created_at", "id"), False),
                   (("server_id", "ended_at"), False))
