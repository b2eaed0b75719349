"""A minimal Docker Engine client for the one question a heartbeat asks (how
many containers, how many running), without loading docker-py: the standard
library's HTTP client over the engine's socket."""

import http.client
import json
import os
import socket

from agent.errors import EngineTimeout, EngineUnreachable

DEFAULT_HOST = "unix:///var/run/docker.sock"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def _connection(timeout):
    host = os.environ.get("DOCKER_HOST", DEFAULT_HOST)
    if host.startswith("unix://"):
        return _UnixConnection(host[len("unix://"):], timeout)
    if host.startswith("tcp://"):
        return http.client.HTTPConnection(host[len("tcp://"):], timeout=timeout)
    raise EngineUnreachable(f"unsupported DOCKER_HOST for the light client: {host}")


def container_states(timeout=5):
    """The state of every container on the host ("running", "exited", ...)."""
    conn = _connection(timeout)
    try:
        conn.request("GET", "/containers/json?all=1")
        response = conn.getresponse()
        if response.status != 200:
            raise EngineUnreachable(f"the container engine answered {response.status}")
        return [c.get("State", "") for c in json.loads(response.read())]
    except TimeoutError as exc:
        raise EngineTimeout("the container engine did not answer in time") from exc
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise EngineUnreachable(f"the container engine could not be reached: {exc}") from exc
    finally:
        conn.close()
