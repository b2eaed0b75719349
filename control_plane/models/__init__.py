"""The whole domain, one module per resource group."""

from control_plane.models.api_key import ApiKey
from control_plane.models.audit import AuditEvent
from control_plane.models.automation import AutomationRule, AutomationRun
from control_plane.models.backup import Backup, BackupImport
from control_plane.models.build import Build
from control_plane.models.domain import CustomDomain
from control_plane.models.environment import AgentCommand, Deployment, Environment, TaskLogLine
from control_plane.models.filestore import BackupPack, FilestoreObject, FilestorePack
from control_plane.models.git import AddonRepository, GitDelivery, GitWebhookSecret
from control_plane.models.idempotency import IdempotencyRecord
from control_plane.models.metrics import EnvironmentMetric, ServerMetric
from control_plane.models.org import Organization, User, UserToken, WebSession
from control_plane.models.project import Project
from control_plane.models.release import Release
from control_plane.models.server import AgentUpgrade, OrgSshKey, RegistrationToken, Server
from control_plane.models.shell import ShellSession
from control_plane.models.ticket import Ticket, TicketComment
from control_plane.models.wal import WalFile
from control_plane.models.webhook import Event, Webhook, WebhookDelivery

ALL_MODELS = [
    Organization, User, UserToken, Server, Project, ApiKey, RegistrationToken,
    Environment, Deployment, TaskLogLine, AgentCommand, Webhook, Event, WebhookDelivery,
    Backup, BackupImport, Ticket, TicketComment, Release, IdempotencyRecord,
    AddonRepository, GitWebhookSecret, GitDelivery, CustomDomain, AutomationRule,
    AutomationRun, OrgSshKey, AgentUpgrade, ServerMetric, EnvironmentMetric,
    AuditEvent, WebSession, FilestorePack, FilestoreObject, BackupPack, WalFile,
    ShellSession, Build,
]

__all__ = [m.__name__ for m in ALL_MODELS] + ["ALL_MODELS"]
