"""Where the agent keeps its configuration and state.

The config file (BERTH_AGENT_CONFIG, default /etc/berth-agent/agent.json)
holds the control plane's addresses, the server id and the agent's own
credential, so it is written with mode 0600."""

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_CONFIG = "/etc/berth-agent/agent.json"
DEFAULT_DATA_DIR = "/var/lib/berth-agent"


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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
