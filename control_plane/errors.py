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
    422: "validation_error",
    429: "rate_limit_exceeded",
    500: "internal_error",
}
