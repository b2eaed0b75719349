"""The mail catcher: every e-mail a non-production ERP of this server sends is
taken by an SMTP server in the agent and kept here, never sent on (catcher.py);
the control plane lists and reads them (store.py) through live requests."""

import json

HOST_NAME = "host.docker.internal"  # how an ERP container names its server (host-gateway)
PORT_FILE = "mail.json"


def kept_port(data_dir):
    """The port this server's catcher had (None: it never ran)."""
    try:
        return json.loads((data_dir / PORT_FILE).read_text())["port"]
    except (OSError, ValueError, KeyError):
        return None


def erp_settings(agent, env_id):
    """What an environment's ERP sends its mail with, or None where this server has
    no catcher (over SSH, or its engine's bridge could not be found)."""
    catcher = agent.mail_catcher()
    if catcher is None:
        return None
    user, password = catcher.credentials(env_id)
    return {"host": HOST_NAME, "port": catcher.port, "user": user, "password": password}
