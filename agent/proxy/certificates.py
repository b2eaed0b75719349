"""The proxy's certificates (agent/proxy/proxy.py), as the agent reads them from the
proxy's state directory: each routed name's certificate file (valid until its
notAfter) and the proxy's JSON log (the last error for a name: failing, and
why); and the handshakes that make the proxy ask for a missing certificate
now, retried with backoff."""

import contextlib
import datetime as dt
import json
import os
import socket
import ssl
import threading
import time

from protocol.states import CertificateState


def states(state_dir, routes):
    """Each routed name's certificate: `valid` (until when), `failing` (the proxy's
    last error for it, newer than any certificate) or `pending`."""
    errors = _last_errors(state_dir / "caddy.log")
    out = {}
    for route in routes.values():
        for name in route["hostnames"]:
            found = sorted(state_dir.glob(f"data/certificates/*/{name}/{name}.crt"),
                           key=lambda p: p.stat().st_mtime)
            until = not_after(found[-1].read_text()) if found else None
            error = errors.get(name)
            if until and (error is None or error[0] <= found[-1].stat().st_mtime):
                out[name] = {"state": CertificateState.VALID, "valid_until": until, "reason": None}
            elif error:
                out[name] = {"state": CertificateState.FAILING, "valid_until": until, "reason": error[1]}
            else:
                out[name] = {"state": CertificateState.PENDING, "valid_until": None, "reason": None}
    return out


class Warmer:
    """A TLS handshake for each routed name without a valid certificate makes the
    proxy obtain one now rather than on a visitor's first request; a name that
    keeps failing is tried again after 5 s, 10 s, ... up to 5 minutes
    (BERTH_AGENT_PROXY_RETRY_SECONDS: the first delay). The proxy keeps its own
    backoff with the ACME server as well."""

    def __init__(self):
        self._tries = {}  # name -> (failures, monotonic time of the next handshake)

    def warm(self, certificates, address):
        for name, cert in certificates.items():
            failures, due = self._tries.get(name, (0, 0.0))
            if cert["state"] == CertificateState.VALID:
                self._tries.pop(name, None)
                continue
            if time.monotonic() < due:
                continue
            base = float(os.environ.get("BERTH_AGENT_PROXY_RETRY_SECONDS") or 5)
            self._tries[name] = (failures + 1,
                                 time.monotonic() + min(300, base * 2 ** min(failures, 10)))
            threading.Thread(target=_handshake, args=(address, name), daemon=True,
                             name="berth-proxy-warm").start()


def _handshake(address, name):
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # only to trigger it
    with contextlib.suppress(OSError):
        with socket.create_connection(address, timeout=60) as sock:
            with context.wrap_socket(sock, server_hostname=name):
                pass


def _last_errors(log_path, tail=256 * 1024):
    """{name: (unix time, message)} of the latest error the proxy logged for each
    name it tried to get a certificate for (its JSON log's last `tail` bytes)."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        name = entry.get("identifier")
        if entry.get("level") == "error" and name and entry.get("ts"):
            out[name] = (float(entry["ts"]), f"{entry.get('msg')}: {entry.get('error')}"[:500])
    return out


def not_after(pem):
    """The leaf certificate's notAfter (ISO 8601), from its DER encoding: the
    agent carries no X.509 library, and this is one fixed path through the
    structure (Certificate > tbsCertificate > validity > notAfter)."""
    end = "-----END CERTIFICATE-----"
    try:
        der = ssl.PEM_cert_to_DER_cert(pem[:pem.index(end) + len(end)])
        _, body, _ = _tlv(der, 0)  # Certificate
        _, first, _ = _tlv(der, body)  # tbsCertificate: its first element
        tag, _, after = _tlv(der, first)
        if tag == 0xA0:  # an explicit version, then the serial number
            _, _, after = _tlv(der, after)
        _, _, after = _tlv(der, after)  # signature algorithm
        _, _, after = _tlv(der, after)  # issuer
        _, validity, _ = _tlv(der, after)
        _, _, after = _tlv(der, validity)  # notBefore
        tag, start, stop = _tlv(der, after)  # notAfter
        text = der[start:stop].decode("ascii")
        when = dt.datetime.strptime(text, "%y%m%d%H%M%SZ" if tag == 0x17 else "%Y%m%d%H%M%SZ")
    except (ValueError, IndexError):
        return None
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _tlv(der, i):
    """(tag, start of the value, end of the value) of the DER element at `i`."""
    tag, length, i = der[i], der[i + 1], i + 2
    if length & 0x80:
        count = length & 0x7F
        length, i = int.from_bytes(der[i:i + count], "big"), i + count
    return tag, i, i + length
