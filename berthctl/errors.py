"""Errors of berthctl, each with the exit code of its class (docs/berthctl.md)."""

OK = 0
API_ERROR = 1  # a 4xx the user can act on (400, 409, 422, 429)
USAGE = 2  # click's own code for a bad command line
AUTH = 3  # 401, 403, or no credentials for the URL
NOT_FOUND = 4  # 404
SERVER = 5  # 5xx, network errors, answers that are not the API's JSON
TASK_FAILED = 6  # a followed task ended failed or cancelled
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it


class CliError(Exception):
    exit_code = API_ERROR

    def __init__(self, message, exit_code=None):
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class ApiError(CliError):
    """An error answer of the API: its status, its `error` code and `message`."""

    def __init__(self, status, code, message, body=None, retry_after=None):
        super().__init__(message, exit_code_for(status))
        self.status, self.code, self.body, self.retry_after = status, code, body, retry_after

    def __str__(self):
        code = f" ({self.code})" if self.code else ""
        return f"{self.message}{code} [HTTP {self.status}]"


class NetworkError(CliError):
    exit_code = SERVER


class TaskFailed(CliError):
    exit_code = TASK_FAILED


def exit_code_for(status):
    if status in (401, 403):
        return AUTH
    if status == 404:
        return NOT_FOUND
    if status >= 500:
        return SERVER
    return API_ERROR
