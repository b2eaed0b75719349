"""Where a webhook may not go: the IANA special-purpose address registries, as one table.

Sources (keep in step with them; Python's `ipaddress` tables lag behind):
- IPv4 Special-Purpose Address Registry, iana-ipv4-special-registry (updated 2025),
  plus 224.0.0.0/4 from the IPv4 Multicast Address Space registry;
- IPv6 Special-Purpose Address Registry, iana-ipv6-special-registry (updated 2025),
  plus ff00::/8 (multicast) and the rule of the IPv6 Address Space registry that only
  2000::/3 is global unicast.

The rule: only globally reachable unicast addresses receive webhooks. Every entry
below is refused, including those IANA marks globally reachable (`iana_global`):
the anycast service addresses (PCP, TURN, DNS-SD SRP, AS112, AMT) answer from the
nearest operator, often the sender's own network, and are no webhook receivers;
ORCHIDv2 and DET prefixes are identifiers, not locators. The exceptions are the two
prefixes that spell an IPv4 address in IPv6 (`embeds_ipv4`): they are judged by the
IPv4 address inside them.
"""

import dataclasses
import ipaddress


@dataclasses.dataclass(frozen=True)
class Range:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    name: str  # as IANA names it
    rfc: str
    iana_global: bool | None  # IANA's "Globally Reachable" (None: N/A or not listed)
    reason: str  # what refusals say: "... is a <reason>"
    embeds_ipv4: bool = False


def _r(cidr, name, rfc, iana_global, reason, embeds_ipv4=False):
    return Range(ipaddress.ip_network(cidr), name, rfc, iana_global, reason, embeds_ipv4)


_PRIVATE, _DOC, _ANYCAST = "private address", "documentation address", "service anycast address"
_AS112 = "AS112 DNS anycast address"

TABLE = (
    # --- IPv4 ---------------------------------------------------------------------------
    _r("0.0.0.0/8", "This network", "RFC 791", False, '"this network" address'),
    _r("0.0.0.0/32", "This host on this network", "RFC 1122", False, "unspecified address"),
    _r("10.0.0.0/8", "Private-Use", "RFC 1918", False, _PRIVATE),
    _r("100.64.0.0/10", "Shared Address Space", "RFC 6598", False, "shared (CGNAT) address"),
    _r("127.0.0.0/8", "Loopback", "RFC 1122", False, "loopback address"),
    _r("169.254.0.0/16", "Link Local", "RFC 3927", False, "link-local address"),
    _r("172.16.0.0/12", "Private-Use", "RFC 1918", False, _PRIVATE),
    _r("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890", False,
       "protocol assignment address"),
    _r("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", False,
       "DS-Lite service continuity address"),
    _r("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", False, "dummy address"),
    _r("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", True, _ANYCAST),
    _r("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", True,
       _ANYCAST),
    _r("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050", False,
       "NAT64 discovery address"),
    _r("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050", False,
       "NAT64 discovery address"),
    _r("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", False, _DOC),
    _r("192.31.196.0/24", "AS112-v4", "RFC 7535", True, _AS112),
    _r("192.52.193.0/24", "AMT", "RFC 7450", True, "AMT relay anycast address"),
    _r("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", None,
       "deprecated 6to4 relay anycast address"),
    _r("192.168.0.0/16", "Private-Use", "RFC 1918", False, _PRIVATE),
    _r("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", True, _AS112),
    _r("198.18.0.0/15", "Benchmarking", "RFC 2544", False, "benchmarking address"),
    _r("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", False, _DOC),
    _r("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", False, _DOC),
    _r("224.0.0.0/4", "Multicast", "RFC 5771", None, "multicast address"),
    _r("240.0.0.0/4", "Reserved", "RFC 1112", False, "reserved address"),
    _r("255.255.255.255/32", "Limited Broadcast", "RFC 8190, RFC 919", False,
       "broadcast address"),
    # --- IPv6 ---------------------------------------------------------------------------
    _r("::1/128", "Loopback Address", "RFC 4291", False, "loopback address"),
    _r("::/128", "Unspecified Address", "RFC 4291", False, "unspecified address"),
    _r("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", False, "IPv4-mapped address",
       embeds_ipv4=True),
    _r("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052", True, "NAT64 address",
       embeds_ipv4=True),
    _r("64:ff9b:1::/48", "IPv4-IPv6 Translat.", "RFC 8215", False,
       "local-use NAT64 address"),
    _r("100::/64", "Discard-Only Address Block", "RFC 6666", False, "discard-only address"),
    _r("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", False, "dummy address"),
    _r("2001::/23", "IETF Protocol Assignments", "RFC 2928", False,
       "protocol assignment address"),
    _r("2001::/32", "TEREDO", "RFC 4380, RFC 8190", None, "Teredo tunnel address"),
    _r("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", True, _ANYCAST),
    _r("2001:1::2/128", "TURN Anycast", "RFC 8155", True, _ANYCAST),
    _r("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", True,
       _ANYCAST),
    _r("2001:2::/48", "Benchmarking", "RFC 5180", False, "benchmarking address"),
    _r("2001:3::/32", "AMT", "RFC 7450", True, "AMT relay anycast address"),
    _r("2001:4:112::/48", "AS112-v6", "RFC 7535", True, _AS112),
    _r("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", None,
       "ORCHID identifier"),
    _r("2001:20::/28", "ORCHIDv2", "RFC 7343", True, "ORCHIDv2 identifier"),
    _r("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374",
       True, "DET identifier"),
    _r("2001:db8::/32", "Documentation", "RFC 3849", False, _DOC),
    _r("2002::/16", "6to4", "RFC 3056", None, "6to4 address"),
    _r("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", True, _AS112),
    _r("3fff::/20", "Documentation", "RFC 9637", False, _DOC),
    _r("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", False, "SRv6 segment identifier"),
    _r("fc00::/7", "Unique-Local", "RFC 4193, RFC 8190", False, _PRIVATE),
    _r("fe80::/10", "Link-Local Unicast", "RFC 4291", False, "link-local address"),
    _r("ff00::/8", "Multicast", "RFC 4291", None, "multicast address"),
)

# Most specific first, so a refusal names the narrowest range (0.0.0.0 is the
# unspecified address before it is "this network").
_BY_VERSION = {v: sorted((r for r in TABLE if r.network.version == v),
                         key=lambda r: -r.network.prefixlen) for v in (4, 6)}
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")


def lookup(ip):
    """The narrowest table entry holding `ip`, or None."""
    return next((r for r in _BY_VERSION[ip.version] if ip in r.network), None)


def refusal(ip):
    """Why `ip` may not receive webhooks ("loopback address", ...), or None."""
    entry = lookup(ip)
    if entry is not None and entry.embeds_ipv4:
        return refusal(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if entry is not None:
        return entry.reason
    if ip.version == 6 and ip not in _GLOBAL_UNICAST_V6:
        return "reserved address"  # IPv6 Address Space registry: reserved by the IETF
    return None
