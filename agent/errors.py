"""The agent's own exceptions, and the one place where the container engine's
foreign errors (docker-py, requests, urllib3, sockets) become them: calls
through docker-py run inside `engine_errors()` (or `call_with_deadline`), and
the agent's other modules catch only these exceptions.

    docker-py's ImageNotFound                    -> ImageNotFound
    docker-py's NotFound (any other 404)         -> ContainerNotFound
    docker-py's APIError (any other answer)      -> EngineError
    a timeout (requests, urllib3, socket)        -> EngineTimeout
    any other failure to reach the engine        -> EngineUnreachable
      (no socket, connection refused or reset, docker-py's other errors)

EngineError is the base of the two "not found" errors, as APIError is of
docker-py's: `except EngineError` catches every error the engine answered
with. Its `detail` is what the engine said, for a caller's own message.
(agent.metrics.engine, which asks the engine without docker-py, turns its own
socket errors into these exceptions.)

Each exception carries the `code` the agent puts in a live reply's
`error_code`; the control plane maps those codes to the spec's errors."""

import socket
import threading
from contextlib import contextmanager

from protocol.errors import AgentErrorCode

# docker-py (with requests and urllib3) is imported only where it is in use:
# it is most of the agent's memory, and a heartbeat never needs it.


class AgentError(Exception):
    code = AgentErrorCode.AGENT_ERROR  # what a live reply says (subclasses: their own)

    def __init__(self, message=None):
        super().__init__(message or self.__doc__)


class NoMailCatcher(AgentError):
    """This server has no mail catcher."""

    code = AgentErrorCode.NO_MAIL_CATCHER


class EngineUnreachable(AgentError):
    """The container engine could not be reached."""

    code = AgentErrorCode.ENGINE_UNREACHABLE


class EngineTimeout(AgentError):
    """The container engine did not answer in time."""

    code = AgentErrorCode.ENGINE_TIMEOUT


class EngineError(AgentError):
    """The container engine answered with an error."""

    code = AgentErrorCode.ENGINE_ERROR

    def __init__(self, message=None, detail=None):
        super().__init__(message)
        self.detail = detail or str(self)


class ContainerNotFound(EngineError):
    """The container does not exist on this server."""

    code = AgentErrorCode.CONTAINER_NOT_FOUND


class ImageNotFound(EngineError):
    """The image is not on this server."""

    code = AgentErrorCode.IMAGE_NOT_FOUND


def _foreign_kinds():
    """(not connected, timed out) exception classes of the engine client.
    A connection that could not be made is "unreachable", even when urllib3
    files it under its timeouts (its NewConnectionError is a ConnectTimeoutError)."""
    import requests.exceptions
    import urllib3.exceptions

    return ((requests.exceptions.ConnectTimeout, urllib3.exceptions.ConnectTimeoutError),
            (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError,
             socket.timeout))


def _timed_out(exc):
    """Whether `exc`, or anything it wraps, is a timeout (requests sometimes
    reports a read timeout as a ConnectionError around a urllib3 error)."""
    not_connected, timeouts = _foreign_kinds()
    pending, seen = [exc], set()
    while pending:
        e = pending.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, not_connected):
            return False
        if isinstance(e, timeouts):
            return True
        pending += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        reason = getattr(e, "reason", None)  # urllib3's MaxRetryError
        if isinstance(reason, BaseException):
            pending.append(reason)
        pending += [e.__cause__, e.__context__]
    return False


@contextmanager
def engine_errors(timeout_s=None):
    """Translate whatever the engine client raises inside the block.
    `timeout_s` only words the message of an EngineTimeout."""
    import docker.errors  # in use inside the block, so already loaded
    import requests.exceptions
    import urllib3.exceptions

    try:
        yield
    except AgentError:
        raise
    except docker.errors.ImageNotFound as exc:
        said = str(exc.explanation or exc)
        raise ImageNotFound(f"image not found: {said}", said) from exc
    except docker.errors.NotFound as exc:
        said = str(exc.explanation or exc)
        raise ContainerNotFound(f"container not found: {said}", said) from exc
    except docker.errors.APIError as exc:
        said = str(exc.explanation or exc)
        raise EngineError(f"container engine error: {said}", said) from exc
    except (requests.exceptions.RequestException, docker.errors.DockerException,
            urllib3.exceptions.HTTPError, OSError) as exc:
        if _timed_out(exc):
            within = f" within {timeout_s:g} s" if timeout_s else ""
            raise EngineTimeout(f"the container engine did not answer{within}") from exc
        raise EngineUnreachable(f"the container engine could not be reached: {exc}") from exc


def call_with_deadline(fn, timeout_s, *args, **kwargs):
    """Run `fn` with engine errors translated, giving up after `timeout_s`
    seconds whatever the client's own timeout is. A call that overruns is left
    to finish on a daemon thread (its client timeout ends it); the caller gets
    EngineTimeout at once."""
    outcome = {}
    done = threading.Event()

    def run():
        try:
            with engine_errors(timeout_s):
                outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="berth-engine-call", daemon=True).start()
    if not done.wait(timeout_s):
        raise EngineTimeout(f"the container engine did not answer within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
