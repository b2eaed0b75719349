"""Git branch names and repository URLs, checked as git itself does, in one place
for the API fields and the add-on repositories.

Branch names follow `git check-ref-format --branch` (git's check_refname_format on
`refs/heads/<name>`, plus its own refusal of a leading `-` and of `HEAD`), within
the spec's 255 characters. Stricter than git on purpose: `@` alone (git reads it as
HEAD) and the Unicode spaces, which look like spaces.

Repository URLs: `https://host/path`, and where a form allows them `ssh://[user@]host
[:port]/path` and scp-like `[user@]host:path`. Never file://, a bare path, a
`<transport>::` address, a leading `-`, or credentials (a password or token in
the URL would be shown to every key and written in logs)."""

import re
from urllib.parse import urlsplit, urlunsplit

MAX_BRANCH = 255
MAX_URL = 2048

# The spaces git allows and we do not: the same set in Python and in the
# ECMAScript regexes of the OpenAPI document (where `\s` differs).
_UNICODE_SPACES = r"\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_BAD_CHARS = re.compile(rf"[\x00-\x20\x7f~^:?*\[\\{_UNICODE_SPACES}]")

# The same rules as one pattern, for the OpenAPI document (each lookahead is one
# rule of branch_problem below; a test checks the two agree).
BRANCH_PATTERN = (r"^(?!-)(?!HEAD$)(?!@$)(?![./])(?!.*(\.\.|@\{|//|/\.|\.lock/))"
                  r"(?!.*(\.lock|[./])$)"
                  rf"[^\x00-\x20\x7f~^:?*\[\\{_UNICODE_SPACES}]{{1,255}}$")


def _bounded(value, what, limit):
    """The checks branch names and URLs share: present, within `limit`, and never
    read by git as an option (a leading `-`)."""
    if not value:
        return f"{what} must not be empty."
    if len(value) > limit:
        return f"{what} has at most {limit} characters."
    if value.startswith("-"):
        return f"{what} must not start with '-'."
    return None


def branch_problem(name):
    """None for a valid branch name, else why it is not (a sentence)."""
    problem = _bounded(name, "A branch name", MAX_BRANCH)
    if problem:
        return problem
    if name in ("HEAD", "@"):
        return f"'{name}' is not a branch name."
    if _BAD_CHARS.search(name):
        return ("A branch name must not contain spaces, control characters or any of "
                "~ ^ : ? * [ \\.")
    for seq in ("..", "@{"):
        if seq in name:
            return f"A branch name must not contain '{seq}'."
    if name.endswith("."):
        return "A branch name must not end with '.'."
    for part in name.split("/"):
        if not part:
            return "A branch name must not start or end with '/' or contain '//'."
        if part.startswith("."):
            return "No part of a branch name may start with '.'."
        if part.endswith(".lock"):
            return "No part of a branch name may end with '.lock'."
    return None


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")  # no ':': no password
_PATH = re.compile(r"[A-Za-z0-9._~%+!$&'()*,;=@/-]+")  # RFC 3986 path characters
_CREDENTIALS = ("A repository URL must not hold credentials (a password or token): give "
                "the server access to the repository instead.")
_SCP = re.compile(r"(?:(?P<user>[^@:/]+)@)?(?P<host>[^@:/]+):(?P<path>.+)")


def url_problem(url, *, ssh=True):
    """None for an allowed repository URL, else why it is not. `ssh` False: only
    https (the spec's form for a project's repository)."""
    problem = _bounded(url, "A repository URL", MAX_URL)
    if problem:
        return problem
    forms = "https://host/path" + (", ssh://host/path or user@host:path" if ssh else "")
    if "://" not in url:
        m = _SCP.fullmatch(url) if ssh and "::" not in url else None
        if ssh and re.match(r"[^/@]*:[^/@]*@", url):
            return _CREDENTIALS
        if m is None:
            return f"A repository URL must be {forms}."
        user, host, path = m.group("user"), m.group("host"), m.group("path")
        if path.startswith("-"):  # handed to the server's git as an argument
            return "The repository URL's path is missing or not valid."
        port = None
    else:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return "The repository URL's host or port is not valid."
        if parts.scheme.lower() not in (("https", "ssh") if ssh else ("https",)):
            return f"A repository URL must be {forms}."
        if parts.password is not None or (parts.username is not None
                                           and parts.scheme.lower() == "https"):
            return _CREDENTIALS
        if parts.query or parts.fragment or "#" in url or "?" in url:
            return "A repository URL must not have a query or a fragment."
        user, host, path = parts.username, parts.hostname or "", parts.path.lstrip("/")
    if user is not None and not _USER.fullmatch(user):
        return "The repository URL's user name is not valid."
    if not _HOST.fullmatch(host):
        return "The repository URL's host is not valid."
    if port == 0:
        return "The repository URL's port is not valid."
    if not path.strip("/") or not _PATH.fullmatch(path):
        return "The repository URL's path is missing or not valid."
    return None


def redact_url(url):
    """A stored repository URL without credentials, as shown and logged: rows
    written before credentials were refused may hold some."""
    if not url or "@" not in url:
        return url
    if "://" not in url:  # scp-like: a user name stays, a password goes
        return re.sub(r"^[^@/]*:[^@/]*@", "", url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/]*@", "//", url)
    if parts.password is None and parts.scheme.lower() != "https":
        return url  # ssh://git@host/…: a user name, no secret
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host))
