"""The values a deploy writes into a configuration file or a command line (ERP
options, PostgreSQL settings, environment variables), checked again on the server."""

import re

from agent.deploy.git import DeployError

# The control plane checked these against its allow-lists; the agent checks again
# that nothing can break out of its line (a configuration file, a command line).
_KEY = re.compile(r"[a-z_]{1,64}")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _plain(value):
    return isinstance(value, str) and value.isprintable()


def option_lines(options, what="ERP options"):
    out = sorted((options or {}).items())
    bad = [k for k, v in out if not (_KEY.fullmatch(k) and _plain(v))]
    if bad:
        raise DeployError(f"refused {what}: {', '.join(map(repr, bad))}")
    return out


def postgres_arguments(settings):
    pairs = option_lines(settings, "PostgreSQL settings")
    return [arg for k, v in pairs for arg in ("-c", f"{k}={v}")]


def variables(values):
    bad = [k for k, v in (values or {}).items()
           if not (_VAR.fullmatch(k) and isinstance(v, str) and "\x00" not in v)]
    if bad:
        raise DeployError(f"refused variables: {', '.join(map(repr, bad))}")
    return dict(values or {})
