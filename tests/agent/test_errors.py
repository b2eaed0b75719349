"""docker-py's errors become the agent's in one place (agent/errors.py): each
engine answer and each failure to reach the engine has its agent exception and
its live reply code."""

import threading
import time

import docker.errors
import pytest
import requests
import urllib3.exceptions

from agent.errors import (
    AgentError,
    ContainerNotFound,
    EngineError,
    EngineTimeout,
    EngineUnreachable,
    ImageNotFound,
    call_with_deadline,
    engine_errors,
)
from tests.support.engine_stand_in import answered, timed_out, unreachable


def translated(exc, timeout_s=None):
    with pytest.raises(AgentError) as raised, engine_errors(timeout_s):
        raise exc
    assert raised.value.__cause__ is exc
    return raised.value


def test_a_missing_container_is_container_not_found():
    exc = answered(404, "No such container: berth-1234-erp")
    assert type(exc) is docker.errors.NotFound
    error = translated(exc)
    assert type(error) is ContainerNotFound and isinstance(error, EngineError)
    assert error.code == "container_not_found"
    assert str(error) == "container not found: No such container: berth-1234-erp"
    assert error.detail == "No such container: berth-1234-erp"


@pytest.mark.parametrize("said", ["No such image: berth-erp:17", "pull access denied for x, "
                                  "repository does not exist or may require 'docker login'"])
def test_a_missing_image_is_image_not_found(said):
    exc = answered(404, said)
    assert type(exc) is docker.errors.ImageNotFound
    error = translated(exc)
    assert type(error) is ImageNotFound and isinstance(error, EngineError)
    assert error.code == "image_not_found"
    assert (str(error), error.detail) == (f"image not found: {said}", said)


def test_another_404_is_container_not_found_as_before():
    error = translated(answered(404, "network berth-1234 not found"))
    assert type(error) is ContainerNotFound
    assert error.detail == "network berth-1234 not found"


@pytest.mark.parametrize("status, said", [
    (409, 'Conflict. The container name "/berth-proxy" is already in use'),
    (500, "driver failed programming external connectivity: address already in use"),
])
def test_any_other_answer_is_an_engine_error(status, said):
    error = translated(answered(status, said))
    assert type(error) is EngineError and error.code == "engine_error"
    assert (str(error), error.detail) == (f"container engine error: {said}", said)


def test_an_engine_error_of_the_agent_says_its_detail():
    assert EngineError("the container engine answered 500 to an exec").detail == (
        "the container engine answered 500 to an exec")
    assert ContainerNotFound().detail == "The container does not exist on this server."


@pytest.mark.parametrize("exc", [
    unreachable(),
    FileNotFoundError(2, "No such file or directory"),
    ConnectionRefusedError(111, "Connection refused"),
    urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection"),
    requests.exceptions.ConnectTimeout("connect timed out"),
    docker.errors.DockerException("Error while fetching server API version"),
])
def test_an_engine_out_of_reach_is_unreachable(exc):
    error = translated(exc)
    assert type(error) is EngineUnreachable and error.code == "engine_unreachable"
    assert str(error).startswith("the container engine could not be reached: ")


@pytest.mark.parametrize("exc", [
    timed_out(),
    TimeoutError("timed out"),
    # requests sometimes files a read timeout as a ConnectionError around urllib3's error.
    requests.exceptions.ConnectionError(urllib3.exceptions.ReadTimeoutError(
        None, "/containers/json", "Read timed out.")),
])
def test_an_engine_that_does_not_answer_is_a_timeout(exc):
    error = translated(exc, timeout_s=8)
    assert type(error) is EngineTimeout and error.code == "engine_timeout"
    assert str(error) == "the container engine did not answer within 8 s"
    assert str(translated(exc)) == "the container engine did not answer"


def test_the_agents_own_errors_and_others_pass_through():
    error = ContainerNotFound("environment e1 has no erp container")
    with pytest.raises(ContainerNotFound) as raised, engine_errors():
        raise error
    assert raised.value is error
    with pytest.raises(KeyError), engine_errors():
        raise KeyError("erp_container")


def test_call_with_deadline_translates_and_returns():
    assert call_with_deadline(lambda a, b=0: a + b, 5, 1, b=2) == 3

    def missing():
        raise answered(404, "No such container: x")

    with pytest.raises(ContainerNotFound):
        call_with_deadline(missing, 5)


def test_call_with_deadline_gives_up_at_its_deadline():
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(EngineTimeout, match="did not answer within 0.2 s"):
        call_with_deadline(release.wait, 0.2, 10)
    assert time.monotonic() - started < 2
    release.set()
