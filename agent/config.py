"""Where the agent keeps its configuration and state.

The config file (BERTH_AGENT_CONFIG, default /etc/berth-agent/agent.json)
holds the control plane's addresses, the server id and the agent's own
credential, so it is written with mode 0600."""

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_CONFIG = "/etc/berth-agent/agent.json"
DEFAULT_DATA_DIR = "/var/lib/berth-agent"
# In an environment's directory while a restore may have changed the environment:
# what an agent restarted mid-restore needs to put the safety backup back.
RESTORE_JOURNAL = ".restore.json"
# In an environment's folder while its WAL is archived: where the shipper sends it
# (agent/deploy/archiving.py; the daemon looks for it without loading the shipper).
WAL_ARCHIVING = "wal-archiving.json"


def config_path():
    return Path(os.environ.get("BERTH_AGENT_CONFIG", DEFAULT_CONFIG))


def data_dir():
    return Path(os.environ.get("BERTH_AGENT_DATA_DIR", DEFAULT_DATA_DIR))


@dataclass
class AgentConfig:
    control_plane: str
    grpc_address: str
    server_id: str
    credential: str
    grpc_tls: bool = False

    @classmethod
    def load(cls, path=None):
        path = path or config_path()
        with open(path) as fh:
            return cls(**json.load(fh))

    def save(self, path=None):
        write_private(path or config_path(), json.dumps(asdict(self), indent=2) + "\n")


def write_private(path, text):
    """Atomically replace `path` with `text`, readable by its owner only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A private temporary name beside it (not the tempfile module: half a
    # megabyte of the agent's memory for one call).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)  # left by a crashed write of a process with our pid
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
