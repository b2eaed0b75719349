"""Automation rules of projects: /projects/{id}/automation-rules,
/automation-rules/{id}, running one now and its runs."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import current_actor
from control_plane.api.fields import Boolean, Schema, UTCDateTime
from control_plane.api.idempotency import idempotent
from control_plane.api.pagination import CursorArgs, cursor_page_schema
from control_plane.api.smorest import REPLAY_DESCRIPTION, Blueprint
from control_plane.services.automation import rules as svc
from control_plane.services.automation import runs as run_svc
from control_plane.vocabulary.states import AutomationTrigger, RunStatus

blp = Blueprint("automation", __name__, description=(
    "Automation rules: on a push (`git_push`, a branch glob), a `schedule` (five-field "
    "cron in an IANA time zone) or an `event` of an environment, an action (`deploy`, "
    "`backup`, `copy_database`, `preview`: an environment per pushed branch, or `test`: a "
    "build of each push, the changed modules' tests in a throwaway environment, see "
    "`/projects/{id}/builds`). Each firing is a run; runs emit `automation_rule.triggered`, "
    "then `automation_rule.completed` or `automation_rule.failed` when the action's task "
    "ends. Problems with a rule are 422 `invalid_automation_rule`, each named by its field "
    "in `details` (`trigger.cron`)."))

ENV = {"format": "uuid", "description": "An environment of the rule's project"}


class AutomationTriggerSchema(ma.Schema):
    type = ma.fields.String(required=True, metadata={"enum": list(svc.TRIGGERS)})
    branch = ma.fields.String(metadata={
        "description": "`git_push`: the branch, or a glob (`feature/*`; `*` crosses `/`)"})
    cron = ma.fields.String(metadata={
        "description": "`schedule`: five fields (minute hour day-of-month month day-of-week)"})
    timezone = ma.fields.String(metadata={
        "description": "`schedule`: an IANA name (default `UTC`); local times keep across "
                       "DST (a skipped time runs once at the change, a repeated one once)"})
    event = ma.fields.String(metadata={"enum": list(svc.EVENTS), "description": "`event`"})
    environment_id = ma.fields.String(metadata={**ENV, "description": "`event`: whose events"})


class AutomationActionSchema(ma.Schema):
    type = ma.fields.String(required=True, metadata={"enum": list(svc.ACTIONS)})
    environment_id = ma.fields.String(metadata={**ENV, "description": (
        "The environment deployed, backed up, or copied into")})
    source_environment_id = ma.fields.String(metadata={**ENV, "description": (
        "`copy_database` (required), `preview` and `test` (optional): whose newest "
        "completed backup is restored, neutralised unless into production (a `test` "
        "without one builds on an empty database)")})
    fresh = Boolean(metadata={"description": "`copy_database`: take a backup of the source "
                                             "first and restore that one (default false)"})
    allow_production = Boolean(metadata={"description": (
        "`copy_database`: required true when the target is a production environment")})
    neutralize_profile = ma.fields.String(metadata={"enum": ["standard", "strict"], "description": (
        "`copy_database`, `preview` and `test`: how the copy is checked after neutralising "
        "(default: the target's copy policy; never weaker)")})
    anonymize = Boolean(metadata={"description": (
        "`copy_database`, `preview` and `test`: rewrite the copy's personal data, irreversibly "
        "(default: the target's copy policy)")})
    ttl_hours = ma.fields.Integer(metadata={"description": (
        "`preview`: a preview whose branch sees no push for this long is deleted "
        "(1 to 8760, default 168)")})
    max_environments = ma.fields.Integer(metadata={"description": (
        "`preview`: at most this many live previews (1 to 50, default 5); the next "
        "push of a new branch is a `skipped` run")})
    keep_hours = ma.fields.Integer(metadata={"description": (
        "`test`: how long a build's environment stays for inspection after it ended "
        "(1 to 168, default 4)")})
    remove_on_success = Boolean(metadata={"description": (
        "`test`: a passing build's environment is removed at once (default true)")})


class AutomationRunSchema(Schema):
    id = ma.fields.UUID(required=True)
    rule_id = ma.fields.UUID(required=True)
    trigger_type = ma.fields.String(required=True, metadata={
        "enum": [t.value for t in AutomationTrigger]})
    branch = ma.fields.String(allow_none=True, required=True)
    actor = ma.fields.String(required=True, metadata={
        "description": "The key's id (`manual`), the pusher (`git_push`) or `scheduler`"})
    status = ma.fields.String(required=True, metadata={
        "enum": [s.value for s in RunStatus]})
    reason = ma.fields.String(allow_none=True, required=True)
    environment_id = ma.fields.UUID(allow_none=True, required=True)
    task_id = ma.fields.UUID(attribute="task", allow_none=True, required=True, metadata={
        "description": "The action's task (a deployment, backup or restore), once started"})
    started_at = UTCDateTime(required=True)
    finished_at = UTCDateTime(allow_none=True, required=True)


class AutomationRuleSchema(Schema):
    id = ma.fields.UUID(required=True)
    project_id = ma.fields.UUID(required=True)
    name = ma.fields.String(required=True)
    enabled = ma.fields.Boolean(required=True)
    trigger = ma.fields.Dict(required=True)
    action = ma.fields.Dict(required=True)
    next_run_at = UTCDateTime(allow_none=True, required=True, metadata={
        "description": "A schedule's next occurrence; null otherwise"})
    last_run = ma.fields.Nested(AutomationRunSchema, allow_none=True, required=True)
    created_at = UTCDateTime(required=True)
    updated_at = UTCDateTime(allow_none=True, required=True)


class AutomationRuleCreateSchema(ma.Schema):
    name = ma.fields.String(required=True, validate=ma.validate.Length(1, 100))
    enabled = Boolean(load_default=True)
    trigger = ma.fields.Nested(AutomationTriggerSchema, required=True)
    action = ma.fields.Nested(AutomationActionSchema, required=True)


class AutomationRuleUpdateSchema(ma.Schema):
    name = ma.fields.String(validate=ma.validate.Length(1, 100))
    enabled = Boolean()
    trigger = ma.fields.Nested(AutomationTriggerSchema)
    action = ma.fields.Nested(AutomationActionSchema)


RulePage = cursor_page_schema(AutomationRuleSchema, "AutomationRulePage")
RunPage = cursor_page_schema(AutomationRunSchema, "AutomationRunPage")



@blp.route("/projects/<uuid:project_id>/automation-rules")
class Rules(MethodView):
    @blp.arguments(CursorArgs, location="query")
    @blp.response(200, RulePage)
    def get(self, args, project_id):
        """List a project's automation rules, oldest first."""
        rows, meta = svc.list_rules(current_actor(), project_id, **args)
        return {"data": rows, "pagination": meta}

    @idempotent
    @blp.arguments(AutomationRuleCreateSchema)
    @blp.alt_response(202, schema="TaskAccepted", description=REPLAY_DESCRIPTION)
    @blp.response(201, AutomationRuleSchema)
    def post(self, body, project_id):
        """Create an automation rule (full-access key; at most 100 a project, 409
        `automation_rule_limit_reached`). Accepts `X-Idempotency-Key`."""
        return svc.create(current_actor(), project_id, **body)


@blp.route("/automation-rules/<uuid:rule_id>")
class RuleById(MethodView):
    @blp.response(200, AutomationRuleSchema)
    def get(self, rule_id):
        return svc.get_rule(current_actor(), rule_id)

    @blp.arguments(AutomationRuleUpdateSchema, required=False)  # no body: nothing changes
    @blp.response(200, AutomationRuleSchema)
    def patch(self, body, rule_id):
        """Change a rule (full-access key): omitted fields stay; `trigger` and
        `action` are replaced whole. A schedule's next occurrence is computed again."""
        return svc.update_rule(current_actor(), rule_id, body)

    @blp.response(204)
    def delete(self, rule_id):
        """Delete a rule (full-access key): it stops at once; its runs stay readable
        at `/automation-rules/{id}/runs` for 90 days."""
        svc.delete_rule(current_actor(), rule_id)


@blp.route("/automation-rules/<uuid:rule_id>/run", methods=["POST"])
@idempotent
@blp.alt_response(202, schema="TaskAccepted", description=REPLAY_DESCRIPTION)
@blp.response(201, AutomationRunSchema)
def run_rule(rule_id):
    """Run a rule now (full-access key): trigger `manual`, actor the key. The run
    is `skipped` (with the reason) when its environment is busy or not ready; a
    disabled rule is 409 `automation_rule_disabled`. Accepts `X-Idempotency-Key`."""
    return run_svc.run_now(current_actor(), rule_id, berth=current_berth())


@blp.route("/automation-rules/<uuid:rule_id>/runs")
@blp.arguments(CursorArgs, location="query")
@blp.response(200, RunPage)
def list_runs(args, rule_id):
    """A rule's runs, newest first (a deleted rule's too, for 90 days)."""
    rows, meta = run_svc.list_runs(current_actor(), rule_id, **args)
    return {"data": rows, "pagination": meta}
