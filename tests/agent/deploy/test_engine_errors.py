"""What Environments does with each engine error at the places it expects some
(a container or an image that is not there, a pull or a start that fails),
against a stand-in client raising docker-py's own errors. (The real engine:
test_environments.py, test_deploy_faults.py.)"""

import pytest

from agent.deploy.environments import DeployError, Environments
from agent.errors import ContainerNotFound, EngineError, EngineTimeout, EngineUnreachable
from tests.support.engine_stand_in import (
    FakeClient,
    FakeContainer,
    answered,
    timed_out,
    unreachable,
)

GONE = answered(404, "No such container: berth-1234-erp")


def environments(client, tmp_path):
    return Environments(client, root=tmp_path)


def test_a_missing_container_is_none(tmp_path):
    found = FakeContainer("berth-1234-erp")
    assert environments(FakeClient(get=GONE), tmp_path)._container("berth-1234-erp") is None
    assert environments(FakeClient(get=found), tmp_path)._container("berth-1234-erp") is found


@pytest.mark.parametrize("failure, error", [
    (answered(500, "the engine broke"), EngineError),
    (unreachable(), EngineUnreachable),
    (timed_out(), EngineTimeout),
])
def test_other_failures_of_a_container_lookup_are_raised(tmp_path, failure, error):
    with pytest.raises(error) as raised:
        environments(FakeClient(get=failure), tmp_path)._container("berth-1234-erp")
    assert not isinstance(raised.value, ContainerNotFound)


def test_an_image_on_the_server_is_not_pulled(tmp_path):
    client, lines = FakeClient(), []
    environments(client, tmp_path)._image("erp:17", lambda *line: lines.append(line))
    assert client.images.pull.args == [] and lines == []


def test_a_missing_image_is_pulled(tmp_path):
    client, lines = FakeClient(image_get=answered(404, "No such image: erp:17")), []
    environments(client, tmp_path)._image("erp:17", lambda *line: lines.append(line))
    assert client.images.pull.args == [(("erp:17",), {})]
    assert lines == [("info", "pulling erp:17")]


@pytest.mark.parametrize("failure, said", [
    (answered(404, "pull access denied for erp, repository does not exist"),
     "pull access denied for erp, repository does not exist"),
    (answered(500, "toomanyrequests: You have reached your pull rate limit"),
     "toomanyrequests: You have reached your pull rate limit"),
])
def test_an_image_that_cannot_be_pulled_is_a_readable_deploy_error(tmp_path, failure, said):
    client = FakeClient(image_get=answered(404, "No such image: erp:17"), pull=failure)
    with pytest.raises(DeployError) as raised:
        environments(client, tmp_path)._image("erp:17", lambda *line: None)
    assert str(raised.value) == (
        f"the image erp:17 is not on this server and could not be pulled: {said}")


def test_an_engine_out_of_reach_while_pulling_is_not_a_deploy_error(tmp_path):
    client = FakeClient(image_get=answered(404, "No such image: erp:17"), pull=unreachable())
    with pytest.raises(EngineUnreachable):
        environments(client, tmp_path)._image("erp:17", lambda *line: None)


def test_an_image_lookup_the_engine_fails_is_raised_without_a_pull(tmp_path):
    client = FakeClient(image_get=answered(500, "the engine broke"))
    with pytest.raises(EngineError, match="the engine broke"):
        environments(client, tmp_path)._image("erp:17", lambda *line: None)
    assert client.images.pull.args == []


def test_a_leftover_container_is_removed_and_a_failed_removal_ignored(tmp_path):
    lines = []
    leftover = FakeContainer("berth-1234-erp")
    environments(FakeClient(get=leftover), tmp_path)._discard(
        "berth-1234-erp", lambda *line: lines.append(line))
    assert leftover.remove.args == [((), {"force": True})]
    assert lines == [("info", "removed the ERP container that could not start")]

    lines.clear()
    stuck = FakeContainer("berth-1234-erp", remove=answered(409, "removal already in progress"))
    environments(FakeClient(get=stuck), tmp_path)._discard(
        "berth-1234-erp", lambda *line: lines.append(line))
    assert stuck.remove.args and lines == []

    environments(FakeClient(get=GONE), tmp_path)._discard("berth-1234-erp", lines.append)
    assert lines == []


def test_an_engine_out_of_reach_while_removing_a_leftover_is_raised(tmp_path):
    cut = FakeContainer("berth-1234-erp", remove=unreachable())
    with pytest.raises(EngineUnreachable):
        environments(FakeClient(get=cut), tmp_path)._discard("berth-1234-erp", lambda *line: None)


def _erp(client, tmp_path, lines):
    n = {"erp": "berth-1234-erp", "network": "berth-1234", "dir": tmp_path / "e1"}
    return environments(client, tmp_path)._erp("e1", n, {"erp_image": "erp:17"},
                                               lambda *line: lines.append(line))


def test_an_erp_the_engine_refuses_to_start_is_removed_and_the_error_raised(tmp_path):
    leftover, lines = FakeContainer("berth-1234-erp"), []
    said = "failed to create task for container: cannot allocate memory"
    client = FakeClient(run=answered(500, said))
    client.containers.get.outcomes = [GONE, leftover]  # none before the run; its leftover after
    with pytest.raises(EngineError) as raised:
        _erp(client, tmp_path, lines)
    assert (type(raised.value), raised.value.detail) == (EngineError, said)
    assert leftover.remove.args == [((), {"force": True})]
    assert ("info", "removed the ERP container that could not start") in lines


def test_an_erp_start_cut_off_from_the_engine_leaves_the_container_alone(tmp_path):
    leftover, lines = FakeContainer("berth-1234-erp"), []
    client = FakeClient(run=unreachable())
    client.containers.get.outcomes = [GONE, leftover]
    with pytest.raises(EngineUnreachable):
        _erp(client, tmp_path, lines)
    assert leftover.remove.args == [] and len(client.containers.get.args) == 1
