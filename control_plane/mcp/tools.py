"""The MCP server's tools: what people do with Berth, each one service call as the
public API makes it, with the API's own argument rules (marshmallow schemas, also
the tools' input JSON Schema) and answer shapes (its response schemas), so a tool
answers what the matching endpoint answers and no secret is in any answer.

Each tool says what it does in MCP's annotations, truthfully: `readOnlyHint` for
reads; a write that replaces what runs or what is stored (a deploy, a rollback, a
restore) is `destructiveHint` and needs `confirm: true`; a write that changes
nothing when repeated is `idempotentHint`. A read-only key is offered the reads
only (and refused a write by name), a project-scoped key no organization-wide tool."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import marshmallow as ma
from flask import current_app

from control_plane.agent_link import current_berth
from control_plane.api.ops.backups import CreateBackupBody, OpsBackupSchema, RestoreBody
from control_plane.api.ops.deployments import DeploymentPage, DeploymentSchema
from control_plane.api.ops.deployments import ListArgs as DeploymentListArgs
from control_plane.api.pagination import CursorArgs
from control_plane.api.public import audit as audit_api
from control_plane.api.public import backups as backups_api
from control_plane.api.public import builds as builds_api
from control_plane.api.public import environments as env_api
from control_plane.api.public import mails as mails_api
from control_plane.api.public import monitoring as monitoring_api
from control_plane.api.public import projects as projects_api
from control_plane.api.public import servers as servers_api
from control_plane.api.public import sizes as sizes_api
from control_plane.api.public.automation import AutomationRuleSchema, RulePage
from control_plane.services import audit
from control_plane.services.automation import builds, rules
from control_plane.services.backups import backups
from control_plane.services.deploys import environments as envs
from control_plane.services.deploys import operations
from control_plane.services.projects import projects
from control_plane.services.servers import mails, monitoring, servers, sizes

ENVIRONMENT = {"environment_id": ma.fields.UUID(required=True, metadata={
    "description": "The environment's id (list_environments)"})}
PROJECT = {"project_id": ma.fields.UUID(required=True, metadata={
    "description": "The project's id (list_projects)"})}
CONFIRM = {"confirm": ma.fields.Boolean(required=True, metadata={
    "description": "true: the caller (or the person behind it) confirms this change"})}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: ma.Schema  # the API's own rules for what the tool is given
    answer: ma.Schema  # the matching endpoint's response schema
    run: Callable[[Any, dict], Any]  # (actor, loaded arguments) -> the service's result
    writes: bool = False
    destructive: bool = False  # replaces what runs or what is stored: `confirm` needed
    idempotent: bool = True  # repeated with the same arguments, nothing more changes
    organization_wide: bool = False  # not for a project-scoped key (the service refuses it)

    def offered_to(self, actor):
        return not ((self.writes and actor.read_only)
                    or (self.organization_wide and actor.project_scoped))

    def call(self, actor, arguments):
        """The service's result as the endpoint answers it (JSON-able)."""
        return self.answer.dump(self.run(actor, arguments))


def _args(*bases, **fields):
    """The arguments' schema: the API's argument schemas, plus `fields`."""
    return type("Arguments", bases or (ma.Schema,), dict(fields))()


def _domain():
    return current_app.config["APPS_DOMAIN"]


def _page(found):
    rows, meta = found
    return {"data": rows, "pagination": meta}


def _action(action):
    return lambda actor, a: envs.act(actor, a["environment_id"], action, berth=current_berth())


ID = ma.fields.UUID(required=True)
WRITE = {"writes": True, "idempotent": False}
DESTRUCTIVE = {**WRITE, "destructive": True}
TOOLS = [
    # --- reads ------------------------------------------------------------------------
    Tool("list_projects", "The projects the key can see, oldest first (a cursor page).",
         _args(CursorArgs), projects_api.ProjectPage(),
         lambda actor, a: _page(projects.list_projects(actor, **a))),
    Tool("get_project", "One project: its repository, default branch and server.",
         _args(**PROJECT), projects_api.ProjectSchema(),
         lambda actor, a: projects.get_project(actor, a["project_id"])),
    Tool("list_environments", "A project's environments with their status and URL.",
         _args(env_api.ListArgs, **PROJECT), env_api.EnvironmentSchema(many=True),
         lambda actor, a: envs.environments_of(actor, a["project_id"], a["status"])[0]),
    Tool("get_environment", "One environment: type, branch, resources, status, URL.",
         _args(**ENVIRONMENT), env_api.EnvironmentSchema(),
         lambda actor, a: envs.get_environment(actor, a["environment_id"])),
    Tool("environment_status", "An environment's status now: containers, last deployment, "
                               "proxy and certificates.",
         _args(**ENVIRONMENT), env_api.StatusSchema(),
         lambda actor, a: envs.status_snapshot(actor, a["environment_id"], _domain())),
    Tool("list_deployments", "Deployments (every task: deploys, restarts, backups, restores), "
                             "newest first, of a project or of all.",
         _args(DeploymentListArgs), DeploymentPage(),
         lambda actor, a: _page(operations.list_deployments(actor, **a))),
    Tool("get_deployment", "One deployment (task): kind, status, commit, times, error.",
         _args(task_id=ID), DeploymentSchema(),
         lambda actor, a: operations.get_deployment(actor, a["task_id"])),
    Tool("task_log", "A task's log (the newest task's without task_id), its last lines.",
         _args(env_api.LogArgs, **ENVIRONMENT), env_api.TaskLogSchema(),
         lambda actor, a: envs.task_log(actor, a["environment_id"], a["task_id"], a["lines"])),
    Tool("runtime_logs", "The ERP's or PostgreSQL's own log now (source erp, postgres or "
                         "container), read from the server.",
         _args(monitoring_api.RuntimeLogArgs, **ENVIRONMENT), monitoring_api.RuntimeLogSchema(),
         lambda actor, a: monitoring.runtime_logs(actor, a["environment_id"], a["source"],
                                                  a["lines"], current_berth())),
    Tool("environment_metrics", "An environment's CPU, memory and disk use now.",
         _args(**ENVIRONMENT), monitoring_api.EnvironmentMetricsSchema(),
         lambda actor, a: monitoring.environment_metrics(actor, a["environment_id"],
                                                         current_berth())),
    Tool("environment_size", "What an environment's size is made of: largest tables, "
                             "attachments missing their file, orphaned files, backups' sizes "
                             "and the growth over the last day.",
         _args(**ENVIRONMENT), sizes_api.EnvironmentSizeSchema(),
         lambda actor, a: sizes.size_report(actor, a["environment_id"])),
    Tool("list_servers", "The servers the organization deploys to, with their state.",
         _args(CursorArgs), servers_api.ServerPage(),
         lambda actor, a: _page(servers.list_servers(actor, **a))),
    Tool("server_metrics", "A server's CPU, memory, disk and load now.",
         _args(server_id=ID), monitoring_api.ServerMetricsSchema(),
         lambda actor, a: monitoring.server_metrics(actor, a["server_id"], current_berth())),
    Tool("list_backups", "An environment's backups, newest first: type, status, sizes.",
         _args(backups_api.BackupListArgs, **ENVIRONMENT), backups_api.BackupPage(),
         lambda actor, a: backups.list_backups(actor, a.pop("environment_id"), **a)),
    Tool("list_mails", "The e-mails a non-production environment's ERP sent, caught on its "
                       "server and never sent on, newest first.",
         _args(mails_api.MailArgs, **ENVIRONMENT), mails_api.MailListSchema(),
         lambda actor, a: mails.list_mails(actor, a["environment_id"], current_berth(),
                                           a["limit"])),
    Tool("get_mail", "One caught e-mail: headers, text and HTML parts, attachments' names.",
         _args(mail_id=ma.fields.String(required=True), **ENVIRONMENT), mails_api.MailSchema(),
         lambda actor, a: mails.get_mail(actor, a["environment_id"], a["mail_id"],
                                         current_berth())),
    Tool("list_rules", "A project's automation rules: trigger, action, whether on.",
         _args(CursorArgs, **PROJECT), RulePage(),
         lambda actor, a: _page(rules.list_rules(actor, a.pop("project_id"), **a))),
    Tool("get_rule", "One automation rule: its trigger, action, next and last run.",
         _args(rule_id=ID), AutomationRuleSchema(),
         lambda actor, a: rules.get_rule(actor, a["rule_id"])),
    Tool("list_builds", "A project's builds (a push's tests), newest first, of one branch "
                        "when given: status, commit, test counts.",
         _args(builds_api.BuildArgs, **PROJECT), builds_api.BuildPage(),
         lambda actor, a: _page(builds.list_builds(actor, a.pop("project_id"), **a))),
    Tool("get_build", "One build: each test's outcome (failures first, with the traceback) "
                      "and the ERP's test log.",
         _args(build_id=ID), builds_api.BuildDetailSchema(),
         lambda actor, a: builds.get_build(actor, a["build_id"])),
    Tool("list_audit_events", "The organization's audit log, newest first: who changed what.",
         _args(audit_api.AuditArgs), audit_api.AuditPage(),
         lambda actor, a: _page(audit.list_events(actor, since=a.pop("from_", None),
                                                  until=a.pop("to", None), **a)),
         organization_wide=True),
    # --- writes ----------------------------------------------------------------------
    Tool("start_environment", "Start a stopped environment.", _args(**ENVIRONMENT),
         env_api.TaskAcceptedSchema(), _action("start"), **WRITE),
    Tool("stop_environment", "Stop an environment: its users cannot reach it until started; "
                             "its data is kept.", _args(**ENVIRONMENT),
         env_api.TaskAcceptedSchema(), _action("stop"), **WRITE),
    Tool("restart_environment", "Restart the ERP: its users are cut off for a few seconds.",
         _args(**ENVIRONMENT), env_api.TaskAcceptedSchema(), _action("restart"), **WRITE),
    Tool("deploy_environment", "Deploy the environment from its branch (modules updated when "
                               "the code changed).", _args(**ENVIRONMENT, **CONFIRM),
         env_api.TaskAcceptedSchema(), _action("deploy"), **DESTRUCTIVE),
    Tool("redeploy_environment", "Deploy the environment again from its branch, even if "
                                 "nothing changed.", _args(**ENVIRONMENT, **CONFIRM),
         env_api.TaskAcceptedSchema(), _action("redeploy"), **DESTRUCTIVE),
    Tool("backup_environment", "Take a manual backup (database, filestore, manifest).",
         _args(CreateBackupBody, **ENVIRONMENT), OpsBackupSchema(),
         lambda actor, a: backups.take(actor, a.pop("environment_id"), berth=current_berth(),
                                       **a), **WRITE),
    Tool("restore_environment", "Replace the environment's database and files with a backup "
                                "(backup_id) or a moment (target_time); a safety backup is "
                                "taken first.",
         _args(RestoreBody, **ENVIRONMENT, **CONFIRM), DeploymentSchema(),
         lambda actor, a: backups.restore_into(
             actor, a["environment_id"], a.get("backup_id"), berth=current_berth(),
             neutralize=a["neutralize"], profile=a["neutralize_profile"],
             anonymize=a["anonymize"], target_time=a.get("target_time"),
             source_environment_id=a.get("source_environment_id")), **DESTRUCTIVE),
    Tool("rollback_deployment", "Go back to a successful deployment's code and "
                                "configuration (task_id: that deployment).",
         _args(task_id=ID, **CONFIRM), DeploymentSchema(),
         lambda actor, a: operations.rollback(actor, a["task_id"], current_berth()),
         **DESTRUCTIVE),
]
BY_NAME = {tool.name: tool for tool in TOOLS}
