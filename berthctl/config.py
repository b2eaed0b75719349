"""Where berthctl keeps its login, and which URL and credentials a command uses.

The environment wins over the stored login (BERTH_URL, BERTH_API_KEY,
BERTH_USER_TOKEN), for scripts and CI. A stored credential is only ever sent to
the URL it was stored for: `--url` pointing elsewhere needs its own credential."""

import json
import os
import tempfile
from pathlib import Path

from berthctl.errors import AUTH, USAGE, CliError

DEFAULT_URL = "http://127.0.0.1:8000"
API_SUFFIXES = ("/api/public/v1", "/api/v1")


def path():
    if os.environ.get("BERTH_CONFIG"):
        return Path(os.environ["BERTH_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "berth" / "berthctl.json"


def normalize_url(url):
    """The control plane's base URL; a pasted API root is accepted too."""
    url = (url or "").strip().rstrip("/")
    for suffix in API_SUFFIXES:
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    if not url.startswith(("http://", "https://")):
        raise CliError(f"Not an http(s) URL: {url!r}", USAGE)
    return url


def load():
    p = path()
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise CliError(f"Cannot read {p}: {err}; run `berthctl login` again.", AUTH) from None
    return data if isinstance(data, dict) else {}


def save(data):
    """Written whole to a new file (mode 0600 from the start, never readable by
    others even for a moment), then renamed over the old one."""
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".berthctl-", dir=p.parent)  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def resolve(url_option=None):
    """(url, api_key, user_token) for this run."""
    stored = load()
    url = normalize_url(url_option or os.environ.get("BERTH_URL") or stored.get("url")
                        or DEFAULT_URL)
    same = stored.get("url") and normalize_url(stored["url"]) == url
    api_key = os.environ.get("BERTH_API_KEY") or (stored.get("api_key") if same else None)
    user_token = os.environ.get("BERTH_USER_TOKEN") or (stored.get("user_token") if same
                                                         else None)
    return url, api_key, user_token
