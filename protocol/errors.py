"""The codes an agent puts in a live reply's `error_code` (empty: it answered).
The agent's exceptions carry them (agent/errors.py); the control plane turns them
into the API's errors (control_plane/services/servers/monitoring.py)."""

from enum import StrEnum


class AgentErrorCode(StrEnum):
    ENGINE_UNREACHABLE = "engine_unreachable"  # the container engine could not be reached
    ENGINE_TIMEOUT = "engine_timeout"  # it did not answer in time
    ENGINE_ERROR = "engine_error"  # it answered with an error
    CONTAINER_NOT_FOUND = "container_not_found"  # no such container on this server
    IMAGE_NOT_FOUND = "image_not_found"  # no such image on this server
    AGENT_ERROR = "agent_error"  # another of the agent's own errors
    UNAVAILABLE = "unavailable"  # anything else, or a request kind the agent does not know
