"""The balancer's agent port bounds what one source address may hold open: 500
connections (deploy/haproxy.cfg), the rest refused as they arrive, while the
agents (here behind the same address) stay connected."""

import socket
import time

import pytest

from tests.support.agents import wait_for

pytestmark = pytest.mark.slow

PER_SOURCE = 500


def _open(sock):
    """False once the far end has closed `sock` (what it sent is read and dropped)."""
    sock.setblocking(False)
    try:
        while True:
            if not sock.recv(65536):
                return False
    except BlockingIOError:
        return True
    except OSError:  # reset
        return False


def test_one_source_address_holds_at_most_500_agent_connections(stack, agents):
    agents, _ = agents
    socks = []
    try:
        for _ in range(PER_SOURCE + 20):
            socks.append(socket.create_connection(("127.0.0.1", stack.grpc_port), timeout=5))
        def settled():  # refused ones are closed at once; accepted ones stay open
            held = sum(_open(s) for s in socks)
            return [held] if held <= PER_SOURCE - len(agents) else None

        [held] = wait_for(settled, timeout=10, interval=0.2,
                          what="the connections past the bound closed")
        # The agents' streams come from the same address and count against it.
        assert PER_SOURCE - len(agents) - 2 <= held <= PER_SOURCE - len(agents), held
        assert all(a.status().get("connected") for a in agents)
    finally:
        for s in socks:
            s.close()
    # Closed ones free their places at once.
    def accepted():
        with socket.create_connection(("127.0.0.1", stack.grpc_port), timeout=5) as s:
            time.sleep(0.3)
            return _open(s)
    wait_for(accepted, timeout=10, interval=0.5, what="a new connection accepted again")
