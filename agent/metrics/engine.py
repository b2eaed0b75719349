"""A minimal Docker Engine client for the few questions periodic work asks (how
many containers, how many running; an environment's database size), without
loading docker-py or even http.client: HTTP/1.0 over the engine's socket.
Every megabyte of the agent's steady-state memory counts on a customer's server."""

import json
import os
import socket
import urllib.parse

from agent.errors import EngineError, EngineTimeout, EngineUnreachable

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


def _request(method, path, timeout, body=None):
    """Status and body of one request; HTTP/1.0, so the engine closes after the body
    (an exec's output stream, too)."""
    data = b"" if body is None else json.dumps(body).encode()
    with _connect(timeout) as sock:
        sock.sendall(f"{method} {path} HTTP/1.0\r\nHost: docker\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                     .encode() + data)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body


def _get(path, timeout):
    return _request("GET", path, timeout)


def _get_json(path, timeout):
    """The engine's JSON answer to a GET, its failures as the agent's errors."""
    def call():
        status, body = _get(path, timeout)
        if status != 200:
            raise EngineUnreachable(f"the container engine answered {status}")
        return json.loads(body)
    return _engine_call(call)


def container_states(timeout=5):
    """The state of every container on the host ("running", "exited", ...)."""
    return [c.get("State", "") for c in _get_json("/containers/json?all=1", timeout)]


def _engine_call(fn):
    """`fn()` with the engine's failures as the agent's errors."""
    try:
        return fn()
    except TimeoutError as exc:
        raise EngineTimeout("the container engine did not answer in time") from exc
    except (OSError, ValueError, IndexError, KeyError) as exc:
        raise EngineUnreachable(f"the container engine could not be reached: {exc}") from exc


def labeled_containers(label, timeout=5):
    """Every container carrying `label` ("key" or "key=value"), as the engine lists them."""
    query = urllib.parse.quote(json.dumps({"label": [label]}))
    return _get_json(f"/containers/json?all=1&filters={query}", timeout)


def exec_output(container_id, cmd, timeout=30):
    """(exit code, standard output) of `cmd` run inside a running container."""
    def call():
        status, body = _request("POST", f"/containers/{container_id}/exec", timeout,
                                {"Cmd": cmd, "AttachStdout": True, "AttachStderr": False})
        if status != 201:
            raise EngineError(f"the container engine answered {status} to an exec")
        exec_id = json.loads(body)["Id"]
        status, stream = _request("POST", f"/exec/{exec_id}/start", timeout,
                                  {"Detach": False, "Tty": False})
        if status != 200:
            raise EngineError(f"the container engine answered {status} to an exec")
        status, body = _get(f"/exec/{exec_id}/json", timeout)
        return json.loads(body).get("ExitCode"), _stdout(stream)
    return _engine_call(call)


def _stdout(stream):
    """Standard output from the engine's multiplexed stream: frames of an 8-byte
    header (stream 1 = stdout; big-endian length) and their bytes."""
    out, i = [], 0
    while i + 8 <= len(stream):
        kind, size = stream[i], int.from_bytes(stream[i + 4:i + 8], "big")
        if kind == 1:
            out.append(stream[i + 8:i + 8 + size])
        i += 8 + size
    return b"".join(out).decode(errors="replace")


def inspect(container_id, timeout=5):
    """The engine's inspection of one container (its restart count, when it started)."""
    return _get_json(f"/containers/{urllib.parse.quote(container_id)}/json", timeout)
