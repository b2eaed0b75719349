"""Incoming push events from Git hosts: POST /webhooks/<git_provider>,
authenticated by an HMAC signature with the project's secret."""

import marshmallow as ma
from flask import request

from control_plane.agent_link import current_berth
from control_plane.api.fields import TEXT_PATTERN
from control_plane.api.smorest import Blueprint, ErrorSchema
from control_plane.infra import ratelimit
from control_plane.services.automation import triggers
from control_plane.services.projects import git_push

blp = Blueprint("git_webhooks", __name__, description="Incoming Git push webhooks")

PROVIDERS = ", ".join(git_push.PROVIDERS)


PROJECT_ID_DOC = ("Only this project (the URL `berth admin project webhook-secret` prints "
                  "carries it); without it, projects are found by `repository.full_name`.")


class GitPushQuerySchema(ma.Schema):
    project_id = ma.fields.UUID(load_default=None, metadata={"description": PROJECT_ID_DOC})


class GitPushDeploymentSchema(ma.Schema):
    project_id = ma.fields.String()
    environment_id = ma.fields.String()
    deployment_id = ma.fields.String()
    source = ma.fields.String(metadata={"description": "`project` or `addon_repository`"})
    git_commit = ma.fields.String(allow_none=True, metadata={
        "description": "The commit deployed; null: the branch head (add-on pushes)"})


class GitPushSkippedSchema(ma.Schema):
    project_id = ma.fields.String()
    environment_id = ma.fields.String()
    reason = ma.fields.String(metadata={
        "description": "`deployment_in_progress`, `no_server` or `not_deployable`"})
    message = ma.fields.String()


class GitPushRunSchema(ma.Schema):
    rule_id = ma.fields.String()
    run_id = ma.fields.String()
    status = ma.fields.String(metadata={
        "description": "`running` (its action started), `skipped` or `failed`"})


class GitPushResultSchema(ma.Schema):
    event = ma.fields.String()
    delivery_id = ma.fields.String(allow_none=True)
    repository = ma.fields.String()
    branch = ma.fields.String(allow_none=True)
    commit = ma.fields.String(allow_none=True)
    duplicate = ma.fields.Boolean(metadata={
        "description": "True: this delivery id was handled before; its first result is "
                       "returned and nothing is done again"})
    ignored = ma.fields.Boolean(metadata={
        "description": "True for events other than branch pushes (ping, tags), and for a "
                       "branch deletion that fired no automation rule"})
    message = ma.fields.String()
    deployments = ma.fields.List(ma.fields.Nested(GitPushDeploymentSchema))
    skipped = ma.fields.List(ma.fields.Nested(GitPushSkippedSchema))
    automation_runs = ma.fields.List(ma.fields.Nested(GitPushRunSchema), metadata={
        "description": "The project's `git_push` automation rules this push fired"})


def _header(name, description, required=False, **schema):
    return {"in": "header", "name": name, "required": required, "description": description,
            "schema": {"type": "string", **schema}}


DOC = {
    "security": [],
    "parameters": [  # listed here, the query parameter too (a list is not merged)
        {"in": "query", "name": "project_id", "required": False,
         "schema": {"type": "string", "format": "uuid"},
         "description": PROJECT_ID_DOC},
        _header("X-Hub-Signature-256", "`sha256=<hex HMAC-SHA256 of the raw body>`, keyed "
                "with the project's webhook secret. Gitea's `X-Gitea-Signature` (bare hex) "
                "and GitLab's `X-Gitlab-Token` (the secret itself) are accepted on their "
                "providers."),
        _header("X-Git-Event", "`push` deploys; other events (`ping`, …) are answered 200 and "
                "ignored. Also `X-GitHub-Event`, `X-Gitea-Event`, `X-Gitlab-Event`.", True,
                minLength=1),
        _header("X-Git-Delivery", "Unique per delivery; a repeated id is handled once. Also "
                "`X-GitHub-Delivery`, `X-Gitea-Delivery`, GitLab's `Idempotency-Key` or "
                "`X-Gitlab-Event-UUID`. Required for push events."),
    ],
    "requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "required": ["ref", "repository", "commits"],
        "properties": {
            "ref": {"type": "string", "minLength": 1, "maxLength": 1024,
                    "example": "refs/heads/main"},
            "after": {"type": "string", "pattern": "^[0-9a-fA-F]{7,64}$",
                      "description": "The new head commit"},
            "repository": {"type": "object", "required": ["full_name"], "properties": {
                "full_name": {"type": "string", "maxLength": 255,
                              "pattern": r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$",
                              "example": "acme/erp"}}},
            "commits": {"type": "array", "items": {
                "type": "object", "propertyNames": {"pattern": TEXT_PATTERN},
                "additionalProperties": {"$ref": "#/components/schemas/JsonValue"}}},
        }}}}},
}


@blp.route("/webhooks/<any(github, gitea, gitlab, generic):git_provider>", methods=["POST"])
@blp.arguments(GitPushQuerySchema, location="query", unknown=ma.EXCLUDE)
@blp.response(200, GitPushResultSchema, headers={
    name: {"schema": {"type": "integer"}}
    for name in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Window")})
@blp.alt_response(400, schema=ErrorSchema, description=(
    "`invalid_payload` (not JSON, text with a NUL or an unpaired surrogate anywhere in it, "
    "or `ref`, `repository.full_name`, `commits` missing) or "
    "`missing_header` (`X-Git-Event`, or `X-Git-Delivery` on a push)"))
@blp.alt_response(401, schema=ErrorSchema, description=(
    "`missing_signature`, or `invalid_signature`: no project with this repository "
    "has a secret that signed this body"))
@blp.alt_response(404, schema=ErrorSchema, description=f"Unknown provider (known: {PROVIDERS})")
@blp.alt_response(429, schema=ErrorSchema, description=(
    "`rate_limit_exceeded`: 30 requests per minute per source address and repository; "
    "`Retry-After` header and `retry_after` field"))
@blp.doc(**DOC)
def receive_push(args, git_provider):
    """Receive a Git push event.

    Configure it on the Git host with the URL and secret that
    `berth admin project webhook-secret PROJECT_ID` prints (content type JSON). A push
    to the branch of an environment with `auto_deploy` on queues a deployment with
    trigger `git_push`, a null `triggered_by` and the pushed commit; a push to an
    active add-on repository with auto-deploy on redeploys every auto-deploy
    environment of its project. An environment with a deployment already pending or
    running is skipped (listed in `skipped`), not queued. The project's `git_push`
    automation rules whose branch glob matches fire too (`automation_runs`); the
    deletion of a branch fires only preview rules, which delete its environment."""
    body = request.get_data(cache=True)  # the raw bytes: the signature covers exactly them
    berth = current_berth()

    def automation(project, push):  # the project's git_push rules, in the same transaction
        return triggers.on_push(project, branch=push.branch, commit=push.commit,
                                deleted=push.deleted, actor=push.pusher, berth=berth,
                                base=push.before)
    summary, state = git_push.receive(
        git_provider, request.headers, body, remote_addr=request.remote_addr,
        project_id=args["project_id"], berth=berth, also=automation)
    return summary, 200, ratelimit.headers_for(state)
