"""A minimal Docker Engine client for the one question a heartbeat asks (how
many containers, how many running), without loading docker-py or even
http.client: one HTTP/1.0 GET over the engine's socket. Every megabyte of the
agent's steady-state memory counts on a customer's server."""

import json
import os
import socket

from agent.errors import EngineTimeout, EngineUnreachable

DEFAULT_HOST = "unix:///var/run/docker.sock"


def _connect(timeout):
    host = os.environ.get("DOCKER_HOST", DEFAULT_HOST)
    if host.startswith("unix://"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address = host[len("unix://"):]
    elif host.startswith("tcp://"):
        name, _, port = host[len("tcp://"):].rpartition(":")
        sock, address = socket.socket(socket.AF_INET, socket.SOCK_STREAM), (name, int(port))
    else:
        raise EngineUnreachable(f"unsupported DOCKER_HOST for the light client: {host}")
    sock.settimeout(timeout)
    sock.connect(address)
    return sock


def _get(path, timeout):
    """Status and body of one GET; HTTP/1.0, so the engine closes after the body."""
    with _connect(timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body


def container_states(timeout=5):
    """The state of every container on the host ("running", "exited", ...)."""
    try:
        status, body = _get("/containers/json?all=1", timeout)
        if status != 200:
            raise EngineUnreachable(f"the container engine answered {status}")
        return [c.get("State", "") for c in json.loads(body)]
    except TimeoutError as exc:
        raise EngineTimeout("the container engine did not answer in time") from exc
    except (OSError, ValueError, IndexError) as exc:
        raise EngineUnreachable(f"the container engine could not be reached: {exc}") from exc
