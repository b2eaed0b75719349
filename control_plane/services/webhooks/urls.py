"""Webhook URL rules: what a webhook may point at.

- `check_url(url)`: create/patch-time validation (HTTPS only, at most 2048
  characters both as sent and as stored, a host, no userinfo, no IP literal that is
  not globally reachable unicast, in any spelling a resolver accepts).
- `blocked_reason(ip)`: the address rule the sender applies again to every address a
  name resolves to at send time (`net`).
"""

import dataclasses
import ipaddress
import re
import socket
import urllib.parse

from control_plane.services.webhooks import special_addresses
from control_plane.vocabulary.errors import InvalidWebhookUrl

MAX_URL_LENGTH = 2048

_HOST_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*"
                      r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_NUMERIC_LABEL_RE = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


@dataclasses.dataclass(frozen=True)
class Target:
    url: str  # normalized
    host: str  # lower-case ASCII name, or the canonical IP text (no brackets)
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None  # host is an IP literal
    port: int
    path: str  # request target: path and query


# --- address rules ------------------------------------------------------------------

def blocked_reason(ip):
    """Why an address may not receive webhooks ("loopback address", ...), or None:
    anything but globally reachable unicast (the table in `special_addresses`)."""
    return special_addresses.refusal(ip)


# --- URL parsing ----------------------------------------------------------------------

def _parse_host(netloc_host, bracketed):
    """The host as a resolver sees it: (ascii host, ip or None). Raises ValueError."""
    if bracketed:
        if "%" in netloc_host:
            raise ValueError("IPv6 zone identifiers are not allowed")
        ip = ipaddress.IPv6Address(netloc_host)
        return ip.compressed, ip
    host = netloc_host.rstrip(".")  # "example.com." is "example.com" to a resolver
    try:
        host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ValueError("the host name is not valid") from None
    if not _HOST_RE.match(host):
        raise ValueError("the host name is not valid")
    if _NUMERIC_LABEL_RE.match(host.rsplit(".", 1)[-1]):
        # Numeric last label: resolvers read it as an IPv4 address, in any of the
        # legacy spellings inet_aton accepts (2130706433, 0x7f.1, 0177.0.0.1, 127.1).
        try:
            ip = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            raise ValueError("the host is neither a valid name nor an IPv4 address") from None
        return str(ip), ip
    return host, None


def parse(url):
    """Split and normalize a webhook URL. Raises ValueError with a readable reason."""
    if not isinstance(url, str) or not url:
        raise ValueError("a URL is required")
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(c <= " " or c == "\x7f" or c == "\\" for c in url):
        raise ValueError("the URL contains spaces, control characters or backslashes")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() != "https":
        raise ValueError("the URL must use https")
    if "@" in parts.netloc:
        raise ValueError("the URL may not contain a user name or password")
    if not parts.hostname:
        raise ValueError("the URL has no host")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the URL's port is not valid") from None
    if port == 0:
        raise ValueError("the URL's port is not valid")
    bracketed = parts.netloc.startswith("[")
    try:
        host, ip = _parse_host(parts.hostname, bracketed)
    except ipaddress.AddressValueError:
        raise ValueError("the IPv6 address is not valid") from None
    netloc = f"[{host}]" if ip is not None and ip.version == 6 else host
    if port is not None:
        netloc += f":{port}"
    normalized = urllib.parse.urlunsplit(("https", netloc, parts.path, parts.query, ""))
    if len(normalized) > MAX_URL_LENGTH:  # IDNA and written-out IPv4 hosts are longer
        raise ValueError(f"the URL is longer than {MAX_URL_LENGTH} characters once its "
                         f"host is normalized to {host}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(normalized, host, ip, port or 443, path)


def literal_refusal(target):
    if target.ip is not None:
        reason = blocked_reason(target.ip)
        if reason:
            return f"{target.host} is {'an' if reason[0] in 'aeiouAEIOS' else 'a'} {reason}"
    elif target.host == "localhost" or target.host.endswith(".localhost"):
        return f"{target.host} is a loopback name"
    return None


def check_url(url, *, allow_private=False):
    """Validate a webhook URL at create/patch time; return it normalized."""
    try:
        target = parse(url)
    except ValueError as exc:
        raise InvalidWebhookUrl(f"Invalid webhook URL: {exc}.") from None
    refusal = None if allow_private else literal_refusal(target)
    if refusal:
        raise InvalidWebhookUrl(f"Invalid webhook URL: {refusal}; webhooks must reach a "
                                "public address.")
    return target.url
