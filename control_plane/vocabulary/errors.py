"""Domain errors: exceptions that carry an HTTP status and an error code.

Services raise them; one handler renders the spec's body
`{"error": code, "message": text}` (plus any extra fields such as `retry_after`)."""


class ApiError(Exception):
    status = 400
    code = "bad_request"
    message = "The request is not valid."

    def __init__(self, message=None, *, code=None, status=None, headers=None, **extra):
        super().__init__(message or self.message)
        self.message = message or self.message
        if code:
            self.code = code
        if status:
            self.status = status
        self.headers = headers or {}
        self.extra = extra

    def body(self):
        return {"error": self.code, "message": self.message, **self.extra}


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"
    message = "A valid API key is required."


class Forbidden(ApiError):
    status, code = 403, "forbidden"
    message = "This key may not do that."


class NotFound(ApiError):
    status, code = 404, "not_found"
    message = "Not found."


class Conflict(ApiError):
    status, code = 409, "conflict"


class Unprocessable(ApiError):
    status, code = 422, "validation_error"
    message = "The request has invalid fields."


class RateLimited(ApiError):
    status, code = 429, "rate_limit_exceeded"
    message = "Rate limit exceeded."

    def __init__(self, retry_after, message=None, *, code=None, headers=None):
        retry_after = max(1, int(retry_after))
        super().__init__(
            message or f"Too many requests; retry in {retry_after} s.",
            code=code,
            headers={**(headers or {}), "Retry-After": str(retry_after)},
            retry_after=retry_after,
        )


class BadGateway(ApiError):
    status, code = 502, "bad_gateway"


class ServiceUnavailable(ApiError):
    status, code = 503, "service_unavailable"


class GatewayTimeout(ApiError):
    status, code = 504, "gateway_timeout"


# --- named errors: one class per code the services raise --------------------

# requests
class InvalidCursor(BadRequest):
    code = "invalid_cursor"


class InvalidIdempotencyKey(BadRequest):
    code = "invalid_idempotency_key"


class IdempotencyKeyInUse(Conflict):
    code = "idempotency_key_in_use"
    message = "A request with this idempotency key is still being processed."


class ConfirmRequired(BadRequest):
    code = "confirm_required"


class InvalidTransition(Conflict):
    code = "invalid_transition"


class TargetRateLimited(RateLimited):
    code = "target_rate_limit"


class WebhookRateLimited(RateLimited):
    code = "webhook_rate_limit"


class ChannelRateLimited(RateLimited):
    code = "channel_rate_limit"


# API keys, user tokens and scopes
class MissingApiKey(Unauthorized):
    code = "missing_api_key"


class InvalidApiKey(Unauthorized):
    code = "invalid_api_key"
    message = "The API key is not valid."


class KeyRevoked(Unauthorized):
    code = "key_revoked"


class KeyExpired(Unauthorized):
    code = "key_expired"


class KeyHasNoOwner(Conflict):
    code = "key_has_no_owner"


class KeyActive(Conflict):
    code = "key_active"


class MissingToken(Unauthorized):
    code = "missing_token"


class InvalidToken(Unauthorized):
    code = "invalid_token"
    message = "The token is not valid."


class TokenExpired(Unauthorized):
    code = "token_expired"


class WriteAccessRequired(Forbidden):
    code = "write_access_required"
    message = "A full-access key is required for this request."


class CsrfFailed(Forbidden):
    """A web console write without its session's token, or from another origin."""
    code = "csrf_failed"


class InvalidCredentials(Unauthorized):
    code = "invalid_credentials"


class InvalidTotpCode(Unauthorized):
    code = "invalid_totp_code"


class WeakPassword(Unprocessable):
    code = "weak_password"


class OrgScopeRequired(Forbidden):
    code = "org_scope_required"


class ProjectScopedKey(Forbidden):
    code = "project_scoped_key"


class PermissionDenied(Forbidden):
    code = "permission_denied"


class ServerRegistrationNotEnabled(Forbidden):
    code = "server_registration_not_enabled"


class SupportTicketsNotEnabled(Forbidden):
    code = "support_tickets_not_enabled"


# server registration
class TokenInvalid(Unauthorized):
    code = "token_invalid"
    message = "This registration token is not valid."


class TokenRevoked(Unauthorized):
    code = "token_revoked"


class TokenConsumed(Conflict):
    code = "token_consumed"


class ServerQuotaExceeded(Conflict):
    code = "server_quota_exceeded"


class InvalidFacts(Unprocessable):
    code = "invalid_facts"


# projects, environments and their tasks
class EnvironmentsRunning(Conflict):
    code = "environments_running"


class NoServer(Conflict):
    code = "no_server"


class ExceedsServerCapacity(Unprocessable):
    code = "exceeds_server_capacity"


class TaskInProgress(Conflict):
    code = "task_in_progress"
    message = "A task is already queued or running for this environment."


class DeploymentInProgress(Conflict):
    code = "deployment_in_progress"
    message = "A deployment is already pending or running for this environment."


class DeploymentNotFailed(BadRequest):
    code = "deployment_not_failed"


class DeploymentNotCancellable(BadRequest):
    code = "deployment_not_cancellable"


class RollbackNotAllowed(BadRequest):
    code = "rollback_not_allowed"


class ServerUnreachable(BadGateway):
    code = "server_unreachable"


class DestroyFailed(BadGateway):
    code = "destroy_failed"


class DestroyTimeout(GatewayTimeout):
    code = "destroy_timeout"


class EnvironmentNotReady(Conflict):
    code = "environment_not_ready"


# The API's codes for what an agent answered with protocol.errors.AgentErrorCode's
# CONTAINER_NOT_FOUND and ENGINE_TIMEOUT (services/servers/monitoring.py maps them).
class ContainerNotFound(Conflict):
    code = "container_not_found"


class EngineTimeout(GatewayTimeout):
    code = "engine_timeout"


class MetricsUnavailable(BadGateway):
    code = "metrics_unavailable"
    message = "The server or its agent did not return metrics. Retry in a minute."


# backups and the agents' transfers

class BackupNotCompleted(BadRequest):
    code = "backup_not_completed"  # download or restore of a backup not `completed`


class TaskNotRetryable(BadRequest):
    code = "task_not_retryable"  # a backup or restore task: take a new one instead


class TransferClosed(Conflict):
    code = "transfer_closed"  # the backup is no longer pending or running


class AgentUpgradeRequired(Conflict):
    code = "agent_upgrade_required"  # the server's agent is too old for what was asked


class ExportInProgress(Conflict):
    code = "export_in_progress"  # the backup's Odoo zip is being written


class ExportNotFound(NotFound):
    code = "export_not_found"  # no Odoo zip of this backup was made yet


class ImportNotUploaded(Conflict):
    code = "import_not_uploaded"  # restore of an import whose upload is not complete


class ImportUploaded(Conflict):
    code = "import_uploaded"  # a part or completion after the upload completed


class AgentCredentialInvalid(Unauthorized):
    code = "invalid_agent_credential"


# add-on repositories and git pushes
class InvalidRepositoryUrl(BadRequest):
    code = "invalid_repository_url"


class InvalidBranch(BadRequest):
    code = "invalid_branch"


class InvalidFullName(BadRequest):
    code = "invalid_full_name"


class AddonRepositoryExists(Conflict):
    code = "addon_repository_exists"


class SecretExists(Conflict):
    code = "secret_exists"


class MissingHeader(BadRequest):
    code = "missing_header"


class InvalidPayload(BadRequest):
    code = "invalid_payload"


class MissingSignature(Unauthorized):
    code = "missing_signature"


class InvalidSignature(Unauthorized):
    code = "invalid_signature"


# outgoing webhooks
class WebhookLimitReached(Conflict):
    code = "webhook_limit_reached"


class NoMailCatcher(Conflict):
    code = "no_mail_catcher"


class ChannelLimitReached(Conflict):
    code = "channel_limit_reached"


# shell sessions
class ShellLimitReached(Conflict):
    code = "shell_limit_reached"


class ShellUnavailable(Conflict):
    code = "shell_unavailable"


class InvalidWebhookUrl(Unprocessable):
    code = "invalid_webhook_url"


class InvalidSshServer(Unprocessable):
    code = "invalid_ssh_server"  # a host that is no host name or address, a key that is no key


# the agent's packages (wheelhouse)
class WheelhouseBuilding(ServiceUnavailable):
    code = "wheelhouse_building"


class WheelhouseBuildFailed(ServiceUnavailable):
    code = "wheelhouse_build_failed"


class WheelhouseMissing(ServiceUnavailable):
    code = "wheelhouse_missing"


# backup storage and its signed URLs (control_plane/storage)
class StorageUrlInvalid(Forbidden):
    code = "storage_url_invalid"
    message = "This storage URL is not valid."


class StorageUrlExpired(Forbidden):
    code = "storage_url_expired"
    message = "This storage URL has expired."


class StorageUrlUsed(Forbidden):
    code = "storage_url_used"
    message = "This upload URL has already been used; ask for a new one."


class UploadNotFound(NotFound):
    code = "upload_not_found"
    message = "No such upload is open."


class InvalidPart(BadRequest):
    code = "invalid_part"


class PartTooLarge(ApiError):
    status, code = 413, "part_too_large"


class RangeNotSatisfiable(ApiError):
    status, code = 416, "range_not_satisfiable"
    message = "The requested range is not within the object."


class StorageUnavailable(BadGateway):
    code = "storage_unavailable"


class OutsideWindow(Unprocessable):
    """A restore's moment outside the environment's point-in-time window (the body
    carries `window_start` and `window_end`, None when there is no window)."""


class InvalidDomain(Unprocessable):
    code = "invalid_domain"  # not a host name a certificate can be had for, or reserved


class DomainInUse(Conflict):
    code = "domain_in_use"  # this organization has it, or it is verified elsewhere


class DomainLimitReached(Conflict):
    code = "domain_limit_reached"


class DomainNotVerified(Conflict):
    code = "domain_not_verified"  # DNS does not show the record (yet)


class DnsUnavailable(BadGateway):
    code = "dns_unavailable"  # the resolver did not answer: nothing was decided


class InvalidConfiguration(Unprocessable):
    code = "invalid_configuration"  # an environment's variables, ERP options or PG settings


# Werkzeug/Flask HTTP errors (routing, method, body parsing) get a code too.
HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    416: "range_not_satisfiable",
    422: "validation_error",
    429: "rate_limit_exceeded",
    500: "internal_error",
}


class InvalidAutomationRule(Unprocessable):
    code = "invalid_automation_rule"  # each problem in `details`, by field (`trigger.cron`)


class AutomationRuleLimitReached(Conflict):
    code = "automation_rule_limit_reached"


class AutomationRuleDisabled(Conflict):
    code = "automation_rule_disabled"


class NoCompletedBackup(Conflict):
    code = "no_completed_backup"  # an automation rule's copy has nothing to restore


class PreviewBoundReached(Conflict):
    code = "preview_bound_reached"  # a rule's max_environments, or its server's memory
