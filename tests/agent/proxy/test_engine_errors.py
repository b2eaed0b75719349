"""What the proxy does with each engine error at the places it expects some (its
container or an ERP container that is not there, a start that fails, a removal
that fails), against a stand-in client raising docker-py's own errors. (The
real proxy, engine and ACME server: tests/e2e/proxy/test_proxy.py.)"""

import pytest

from agent.errors import EngineError, EngineUnreachable
from agent.proxy import proxy as proxy_module
from agent.proxy.proxy import Proxy, ProxyError
from tests.support.engine_stand_in import Calls, FakeClient, FakeContainer, answered, unreachable

GONE = answered(404, "No such container: berth-proxy")


def test_a_missing_proxy_container_is_none(tmp_path):
    assert Proxy(FakeClient(get=GONE), tmp_path)._container() is None
    running = FakeContainer("berth-proxy")
    assert Proxy(FakeClient(get=running), tmp_path)._container() is running


def test_other_failures_of_the_proxy_lookup_are_raised(tmp_path):
    with pytest.raises(EngineError, match="the engine broke"):
        Proxy(FakeClient(get=answered(500, "the engine broke")), tmp_path)._container()
    with pytest.raises(EngineUnreachable):
        Proxy(FakeClient(get=unreachable()), tmp_path)._container()


def test_an_erp_container_that_is_gone_or_stopped_has_no_address(tmp_path):
    assert Proxy(FakeClient(get=GONE), tmp_path)._address("id-erp") is None
    stopped = FakeContainer("erp", status="exited")
    assert Proxy(FakeClient(get=stopped), tmp_path)._address("id-erp") is None
    assert Proxy(FakeClient(get=FakeContainer("erp")), tmp_path)._address("id-erp") == "10.1.2.3"


@pytest.fixture
def started(monkeypatch):
    """_start with the admin socket's wait replaced: `started.fail` makes it fail."""
    class Waited:
        fail = None

        def __call__(self, path, container):
            if self.fail:
                raise self.fail

    waited = Waited()
    monkeypatch.setattr(proxy_module, "_wait_for_socket", waited)
    return waited


def test_an_old_proxy_that_cannot_be_removed_does_not_stop_the_start(tmp_path, started):
    old = FakeContainer("berth-proxy", status="exited", remove=answered(409, "in progress"))
    new = FakeContainer("berth-proxy")
    client = FakeClient(run=new)
    Proxy(client, tmp_path)._start("caddy:2", old)
    assert old.remove.args and client.containers.run.args[0][0] == ("caddy:2",)


def test_a_proxy_the_engine_refuses_to_start_is_a_readable_proxy_error(tmp_path, started):
    said = ("driver failed programming external connectivity on endpoint berth-proxy: "
            "Bind for 0.0.0.0:443 failed: port is already allocated")
    with pytest.raises(ProxyError) as raised:
        Proxy(FakeClient(run=answered(500, said)), tmp_path)._start("caddy:2", None)
    assert str(raised.value) == f"the proxy (caddy:2) could not start: {said}"
    assert raised.value.code == "proxy_failed"


def test_a_proxy_start_cut_off_from_the_engine_is_not_a_proxy_error(tmp_path, started):
    with pytest.raises(EngineUnreachable):
        Proxy(FakeClient(run=unreachable()), tmp_path)._start("caddy:2", None)


@pytest.mark.parametrize("removal", [None, GONE, answered(500, "the engine broke")])
def test_a_proxy_that_never_answers_is_removed_for_the_next_try(tmp_path, started, removal):
    container = FakeContainer("berth-proxy", remove=removal)
    started.fail = ProxyError("the proxy's admin API did not come up within 20 s")
    with pytest.raises(ProxyError, match="did not come up"):
        Proxy(FakeClient(run=container), tmp_path)._start("caddy:2", None)
    assert container.remove.args == [((), {"force": True})]


def test_a_proxy_that_stops_as_it_starts_says_why(tmp_path):
    said = b'{"level":"error","msg":"listen tcp :443: bind: address already in use"}\n'
    container = FakeContainer("berth-proxy", status="exited", logs=said)
    with pytest.raises(ProxyError, match="the proxy stopped as it started: .*address already"):
        proxy_module._wait_for_socket(tmp_path / "admin.sock", container, timeout=5)
    assert container.reload.args


def test_a_proxy_whose_container_vanishes_while_starting_is_an_engine_error(tmp_path):
    container = FakeContainer("berth-proxy")
    container.reload = Calls(GONE)
    with pytest.raises(EngineError):
        proxy_module._wait_for_socket(tmp_path / "admin.sock", container, timeout=5)
