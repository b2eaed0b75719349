"""Every git command the agent runs, with one set of guards.

- Transports: only those in BERTH_AGENT_GIT_PROTOCOLS (default `https:ssh`), through
  git's own GIT_ALLOW_PROTOCOL: file://, bare local paths (the file transport:
  another environment's checkout on the same server) and ext:: never clone,
  submodules and redirects included.
- Arguments: a URL or branch starting with `-` is refused before git sees it, and
  the URL comes after `--`; a commit must be hex.
- Logs and errors: the URL without credentials (rows stored before the control
  plane refused them may still hold some), git's own messages included."""

import os
import re
import subprocess

from agent.errors import AgentError
from protocol.errors import AgentErrorCode

DEFAULT_PROTOCOLS = "https:ssh"
_COMMIT = re.compile(r"[0-9a-f]{7,64}")
_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]*@")  # userinfo of any URL in a text


class DeployError(AgentError):
    code = AgentErrorCode.DEPLOY_FAILED


def protocols():
    """The transports git may use, as GIT_ALLOW_PROTOCOL reads them."""
    return os.environ.get("BERTH_AGENT_GIT_PROTOCOLS") or DEFAULT_PROTOCOLS


def redact(text):
    """`text` (a URL, or git's message naming one) without URL credentials; an
    ssh user name (`ssh://git@host/…`) is no secret and stays."""
    def strip(m):
        start = m.start()
        scheme = text[text.rfind(" ", 0, start) + 1:start].lower()
        keep = scheme.endswith("ssh://") and ":" not in m.group(0)
        return m.group(0) if keep else ""
    return _CREDENTIALS.sub(strip, text) if text else text


def check_ref(what, value):
    if not value or value.startswith("-") or re.search(r"[\x00-\x20\x7f]", value):
        raise DeployError(f"{what}: not a valid URL or branch")


def clone(url, branch, dest, *, what, shallow=False):
    """`url` at `branch` into `dest` (a new directory)."""
    check_ref(what, url)
    check_ref(what, branch)
    depth = ["--depth", "1"] if shallow else []
    run(["clone", "--quiet", *depth, "--branch", branch, "--", url, str(dest)],
        f"cloning {what}")


def checkout(work, commit, *, what):
    if not _COMMIT.fullmatch(commit or ""):
        raise DeployError(f"{what}: not a commit id: {commit!r}")
    run(["-C", str(work), "checkout", "--quiet", commit], f"checking out {commit} of {what}")


def head(work):
    return run(["-C", str(work), "rev-parse", "HEAD"], "reading the commit").strip()


def described(work):
    """{git_message, git_author}: the checked-out commit's subject line and author's
    name, each at most 200 characters (a deployment's history shows them)."""
    out = run(["-C", str(work), "log", "-1", "--format=%s%x00%an"], "reading the commit")
    subject, _, author = out.rstrip("\n").partition("\0")
    return {"git_message": subject[:200], "git_author": author[:200]}


def run(args, what):
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": protocols()}
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=300,
                             env=env)
    except FileNotFoundError:
        raise DeployError("git is not installed on this server") from None
    except subprocess.TimeoutExpired:
        raise DeployError(f"{what} took longer than 5 minutes") from None
    if out.returncode != 0:
        message = redact(out.stderr.strip())[-500:] or out.returncode
        raise DeployError(f"{what} failed: {message}")
    return out.stdout

