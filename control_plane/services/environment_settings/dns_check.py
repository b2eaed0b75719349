"""The DNS lookups that prove control of a custom domain, at the resolver of
the `DNS_RESOLVER` setting (`host` or `host:port`, `[v6]:port`; the system's
resolvers when unset), each bounded by `DNS_TIMEOUT` seconds. No cache: a
record just published is seen at the next check."""

import dns.exception
import dns.resolver

from control_plane.vocabulary.errors import DnsUnavailable


class Resolver:
    def __init__(self, address=None, timeout=5.0):
        self._dns = dns.resolver.Resolver(configure=not address)
        if address:
            host, port = _split(address)
            self._dns.nameservers, self._dns.port = [host], port
        self._dns.lifetime = float(timeout)

    @classmethod
    def from_settings(cls, settings):
        return cls(settings.get("DNS_RESOLVER"), settings.get("DNS_TIMEOUT") or 5.0)

    def proof(self, name, challenge_name, txt_value, cname_target):
        """(True, None) when `challenge_name` has a TXT record `txt_value` or `name`
        is a CNAME to `cname_target`; else (False, what was found). A resolver
        that does not answer raises DnsUnavailable: nothing is decided."""
        texts = self._answers(challenge_name, "TXT")
        values = [b"".join(r.strings).decode("utf-8", "replace") for r in texts]
        if txt_value in values:
            return True, None
        targets = [r.target.to_text(omit_final_dot=True).lower()
                   for r in self._answers(name, "CNAME")]
        if cname_target.lower() in targets:
            return True, None
        seen = ([f"TXT {challenge_name} holds {', '.join(map(repr, values))}"] if values
                else [f"no TXT record at {challenge_name}"])
        seen.append(f"{name} is a CNAME to {', '.join(targets)}" if targets
                    else f"no CNAME at {name}")
        return False, "; ".join(seen)

    def addresses(self, name):
        """The name's IPv4 then IPv6 addresses (empty: it has none)."""
        return [r.address for rdtype in ("A", "AAAA") for r in self._answers(name, rdtype)]

    def _answers(self, qname, rdtype):
        try:
            return list(self._dns.resolve(qname, rdtype, raise_on_no_answer=False,
                                          search=False))
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return []
        except (dns.exception.Timeout, dns.resolver.NoNameservers) as exc:
            raise DnsUnavailable(f"The DNS resolver did not answer for {qname}: {exc}") from None
        except dns.exception.DNSException as exc:
            raise DnsUnavailable(f"DNS lookup of {qname} failed: {exc}") from None


def _split(address):
    """`host`, `host:port`, `[v6]:port` or a bare IPv6 address -> (host, port)."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest.lstrip(":") or 53)
    if address.count(":") == 1:
        host, port = address.split(":")
        return host, int(port)
    return address, 53
