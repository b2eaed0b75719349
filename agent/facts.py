"""What the agent tells the control plane about its host."""

import os
import socket

import psutil

from agent import __version__
from agent.metrics.host import disk_path
from protocol.v1 import agent_pb2 as pb


def host_facts(data_path=None):
    # The disk size is of the same filesystem that the heartbeats' disk figures describe.
    return pb.HostFacts(
        hostname=socket.gethostname(),
        cpu_cores=psutil.cpu_count() or 1,
        ram_mb=psutil.virtual_memory().total // (1024 * 1024),
        disk_gb=psutil.disk_usage(data_path or disk_path()).total // (1024 ** 3),
        os=f"{os.uname().sysname} {os.uname().release}",
        arch=os.uname().machine,
        agent_version=__version__,
    )
