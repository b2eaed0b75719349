"""A stand-in for the container engine: docker-py's own errors, made as docker-py
makes them from an engine's answer, and a client whose calls raise them, for
tests of how the agent translates them (agent/errors.py) and what each place
that expects some then does."""

import json

import docker.errors
import requests


def answered(status, message):
    """The docker-py error for an engine that answered `status` with `message`
    (ImageNotFound, NotFound or APIError, as docker-py classifies it)."""
    response = requests.Response()
    response.status_code, response.reason = status, "Error"
    response.url = "http+docker://localhost/v1.47/anything"
    response._content = json.dumps({"message": message}).encode()
    try:
        docker.errors.create_api_error_from_http_exception(
            requests.exceptions.HTTPError(response=response))
    except docker.errors.APIError as exc:
        return exc
    raise AssertionError("docker-py raised no error")


def unreachable():
    return requests.exceptions.ConnectionError("Connection aborted: No such file or directory")


def timed_out():
    return requests.exceptions.ReadTimeout("Read timed out. (read timeout=20)")


class Calls:
    """A stand-in for one docker-py method: each call takes the next outcome (an
    exception is raised, anything else returned; the last one stays)."""

    def __init__(self, *outcomes):
        self.outcomes, self.args = list(outcomes) or [None], []

    def __call__(self, *args, **kwargs):
        self.args.append((args, kwargs))
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


class FakeContainer:
    def __init__(self, name, status="running", ip="10.1.2.3", remove=None, logs=b""):
        self.name, self.id, self.status = name, f"id-{name}", status
        self.attrs = {"NetworkSettings": {"Networks": {"berth-x": {"IPAddress": ip}}},
                      "Mounts": []}
        self.remove, self.reload, self.logs = Calls(remove), Calls(), Calls(logs)


class FakeClient:
    """docker.DockerClient as far as the call sites under test use it."""

    def __init__(self, get=None, run=None, image_get=None, pull=None):
        self.containers = type("Containers", (), {})()
        self.containers.get, self.containers.run = Calls(get), Calls(run)
        self.images = type("Images", (), {})()
        self.images.get, self.images.pull = Calls(image_get), Calls(pull)
