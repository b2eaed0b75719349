"""A DNS server on loopback whose records a test changes as it goes: dnslib's
UDP server (a real DNS server on a socket, queried by the control plane's own
resolver code over the network stack), authoritative for whatever names the
test publishes and NXDOMAIN for every other."""

import threading

from dnslib import CNAME, QTYPE, RCODE, RR, TXT, A
from dnslib.server import BaseResolver, DNSLogger, DNSServer


class _Records(BaseResolver):
    def __init__(self):
        self.lock = threading.Lock()
        self.records = {}  # (name, type) -> [rdata]
        self.silent = False

    def resolve(self, request, handler):
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        qtype = QTYPE[request.q.qtype]
        with self.lock:
            found = list(self.records.get((name, qtype), ()))
            known = any(n == name for n, _ in self.records)
            alias = self.records.get((name, "CNAME")) if qtype != "CNAME" else None
            if not found and alias:  # answered like a resolver: the alias, then its records
                target = str(alias[0].label).rstrip(".").lower()
                reply.add_answer(RR(request.q.qname, QTYPE.CNAME, rdata=alias[0], ttl=0))
                name, found = target, list(self.records.get((target, qtype), ()))
        for rdata in found:
            reply.add_answer(RR(name + ".", getattr(QTYPE, qtype), rdata=rdata, ttl=0))
        if not found and not known:
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


class LoopbackDNS:
    """`address` is what CP_DNS_RESOLVER takes (127.0.0.1:port)."""

    def __init__(self):
        self._records = _Records()
        self._server = DNSServer(self._records, address="127.0.0.1", port=0,
                                 logger=DNSLogger("-request,-reply,-truncated,-error,-recv,"
                                                  "-send,-data", prefix=False))
        self.port = self._server.server.server_address[1]
        self.address = f"127.0.0.1:{self.port}"
        self._server.start_thread()

    def txt(self, name, *values):
        self._set(name, "TXT", [TXT(v) for v in values])

    def a(self, name, address="127.0.0.1"):
        self._set(name, "A", [A(address)])

    def cname(self, name, target):
        self._set(name, "CNAME", [CNAME(target + ".")])

    def clear(self):
        with self._records.lock:
            self._records.records.clear()

    def _set(self, name, qtype, rdata):
        with self._records.lock:
            self._records.records[(name.lower(), qtype)] = rdata

    def stop(self):
        self._server.stop()
