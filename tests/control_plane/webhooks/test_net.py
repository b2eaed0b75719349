"""The webhook network layer: URL checks and the SSRF-safe sender, against a real
HTTPS receiver. No database."""

import hashlib
import hmac
import socket
import ssl
import threading
import time

import pytest

from control_plane.services.webhooks import net, urls
from control_plane.vocabulary.errors import Unprocessable
from tests.support import webhook_receiver

# The receiver's fixtures, by name.
https_receiver = webhook_receiver.https_receiver
trust_ca = webhook_receiver.trust_ca

BODY = b'{"event": "webhook.test"}'
HEADERS = {"Content-Type": "application/json"}


# --- check_url ------------------------------------------------------------------------

@pytest.mark.parametrize("url, normalized", [
    ("https://hooks.example.com/x?y=1", "https://hooks.example.com/x?y=1"),
    ("HTTPS://Hooks.Example.COM:8443/a", "https://hooks.example.com:8443/a"),
    ("https://example.com", "https://example.com"),
    ("https://example.com./p#frag", "https://example.com/p"),
    ("https://93.184.216.34/hook", "https://93.184.216.34/hook"),
    ("https://1572395042/", "https://93.184.216.34/"),  # decimal spelling, public
    ("https://[2606:2800:220:1::248]/h", "https://[2606:2800:220:1::248]/h"),
    ("https://[::ffff:8.8.8.8]/", "https://[::ffff:808:808]/"),
    ("https://bücher.example/", "https://xn--bcher-kva.example/"),
])
def test_check_url_accepts_public_https(url, normalized):
    assert urls.check_url(url) == normalized


@pytest.mark.parametrize("url", [
    "http://example.com/hook",
    "ftp://example.com/",
    "example.com/hook",
    "https://",
    "https:///path",
    "https://user:pw@example.com/",
    "https://user@example.com/",
    "https://example.com:0/",
    "https://example.com:99999/",
    "https://exa mple.com/",
    "https://example.com/a b",
    "https://example.com\\@evil.test/",
    "https://exa%6dple.com/",
    "https://1.2.3.4.5/",
    "https://999.1.1.1/",
    "https://[not-ipv6]/",
    "https://example.com/" + "a" * 2030,
    "",
    None,
])
def test_check_url_rejects_malformed(url):
    with pytest.raises(Unprocessable) as info:
        urls.check_url(url)
    assert info.value.code == "invalid_webhook_url"
    assert info.value.status == 422


def test_check_url_length_limit_is_2048():
    base = "https://example.com/"
    assert urls.check_url(base + "a" * (2048 - len(base)))
    with pytest.raises(Unprocessable):
        urls.check_url(base + "a" * (2049 - len(base)))


PRIVATE_LITERALS = [
    "127.0.0.1", "127.1", "2130706433", "0x7f.1", "0x7f000001", "0177.0.0.1",
    "0177.1", "127.0.0.1.", "0", "0.0.0.0", "10.0.0.5", "172.16.0.1", "192.168.1.1",
    "169.254.169.254", "2852039166", "100.64.0.1", "100.127.255.254", "224.0.0.1",
    "239.255.255.250", "240.0.0.1", "255.255.255.255",
    "[::1]", "[::]", "[fe80::1]", "[fc00::1]", "[fd00:ec2::254]", "[ff02::1]",
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::ffff:169.254.169.254]",
    "[::ffff:10.0.0.1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]", "[64:ff9b::a9fe:a9fe]",
    "[2002:7f00:1::]", "[2001:db8::1]", "localhost", "api.localhost",
]


@pytest.mark.parametrize("host", PRIVATE_LITERALS)
def test_check_url_rejects_private_literals(host):
    with pytest.raises(Unprocessable) as info:
        urls.check_url(f"https://{host}/hook")
    assert info.value.code == "invalid_webhook_url"
    assert "public address" in info.value.message


@pytest.mark.parametrize("host", ["127.0.0.1", "2130706433", "[::ffff:127.0.0.1]",
                                  "10.0.0.5", "localhost"])
def test_check_url_allow_private_skips_only_the_address_rule(host):
    assert urls.check_url(f"https://{host}:8443/h", allow_private=True)
    with pytest.raises(Unprocessable):
        urls.check_url(f"http://{host}/h", allow_private=True)


def test_check_url_normalizes_legacy_ipv4_spellings_under_allow_private():
    assert urls.check_url("https://0x7f.1/", allow_private=True) == "https://127.0.0.1/"


# --- post: delivery -------------------------------------------------------------------

def test_post_delivers_to_real_https_receiver(https_receiver, trust_ca):
    result = net.post(https_receiver.url + "/hook", BODY,
                              {**HEADERS, "X-SVC-Signature": "sha256=abc"},
                              allow_private=True, ca_bundle=trust_ca)
    assert result.ok and result.error is None
    assert result.status_code == 200
    assert result.body_snippet == '{"ok": true}'
    assert 0 <= result.duration_ms < 5000
    (received,) = https_receiver.requests
    assert (received.method, received.path, received.body) == ("POST", "/hook", BODY)
    assert received.headers["Host"] == f"127.0.0.1:{https_receiver.port}"
    assert received.headers["Content-Type"] == "application/json"


def test_post_by_host_name_verifies_certificate_for_the_name(https_receiver, trust_ca):
    result = net.post(https_receiver.localhost_url + "/n?x=1", BODY, HEADERS,
                              allow_private=True, ca_bundle=trust_ca)
    assert result.ok, result.error
    received = https_receiver.requests[-1]
    assert received.path == "/n?x=1"
    assert received.headers["Host"] == f"localhost:{https_receiver.port}"


def test_receiver_verifies_signature(https_receiver, trust_ca):
    signature = "sha256=" + hmac.new(b"whsec_x", BODY, hashlib.sha256).hexdigest()
    net.post(https_receiver.url, BODY, {"X-SVC-Signature": signature},
                     allow_private=True, ca_bundle=trust_ca)
    received = https_receiver.requests[-1]
    assert https_receiver.verify(received, "whsec_x")
    assert not https_receiver.verify(received, "whsec_other")


def test_post_reports_http_errors_and_status_sequences(https_receiver, trust_ca):
    https_receiver.respond(500, 503, then=204)
    results = [net.post(https_receiver.url, BODY, HEADERS, allow_private=True,
                                ca_bundle=trust_ca) for _ in range(3)]
    assert [(r.ok, r.status_code, r.error) for r in results] == [
        (False, 500, "HTTP 500"), (False, 503, "HTTP 503"), (True, 204, None)]
    assert results[0].body_snippet == '{"ok": false}'


def test_post_does_not_follow_redirects(https_receiver, trust_ca):
    https_receiver.redirect("https://93.184.216.34/elsewhere", path="/r")
    result = net.post(https_receiver.url + "/r", BODY, HEADERS,
                              allow_private=True, ca_bundle=trust_ca)
    assert not result.ok
    assert result.status_code == 302
    assert result.error == "redirect not followed (302)"
    assert len(https_receiver.requests) == 1


def test_post_times_out_on_hanging_receiver(https_receiver, trust_ca):
    https_receiver.hang(5)
    started = time.monotonic()
    result = net.post(https_receiver.url, BODY, HEADERS, timeout=1,
                              allow_private=True, ca_bundle=trust_ca)
    assert time.monotonic() - started < 2.5
    assert not result.ok and result.status_code is None
    assert result.error == "timed out after 1 s"
    assert 900 <= result.duration_ms < 2500


def test_post_reports_tls_error_without_the_ca(https_receiver):
    result = net.post(https_receiver.url, BODY, HEADERS, allow_private=True)
    assert not result.ok and result.status_code is None
    assert result.error.startswith("TLS error: ")
    assert "certificate" in result.error or "issuer" in result.error
    assert https_receiver.requests == []


def test_post_reports_tls_error_for_a_name_not_in_the_certificate(
        https_receiver, trust_ca, monkeypatch):
    monkeypatch.setattr(net, "resolve", lambda host, port: ["127.0.0.1"])
    result = net.post(f"https://hooks.example.com:{https_receiver.port}/", BODY,
                              HEADERS, allow_private=True, ca_bundle=trust_ca)
    assert result.error.startswith("TLS error: ")
    assert "hooks.example.com" in result.error or "match" in result.error
    assert https_receiver.requests == []


def test_post_connection_refused(https_receiver, trust_ca):
    port = https_receiver.port
    https_receiver.close()
    result = net.post(f"https://127.0.0.1:{port}/", BODY, HEADERS,
                              allow_private=True, ca_bundle=trust_ca)
    assert (result.ok, result.status_code, result.error) == (False, None,
                                                             "connection refused")


def test_post_reads_at_most_a_snippet(https_receiver, trust_ca, monkeypatch):
    monkeypatch.setattr(net, "SNIPPET_CHARS", 5)
    result = net.post(https_receiver.url, BODY, HEADERS, allow_private=True,
                              ca_bundle=trust_ca)
    assert result.body_snippet == '{"ok"'


def test_post_reuses_connections_and_is_thread_safe(https_receiver, trust_ca):
    results = []

    def send():
        for _ in range(10):
            results.append(net.post(https_receiver.url, BODY, HEADERS,
                                            allow_private=True, ca_bundle=trust_ca))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 40 and all(r.ok for r in results)
    assert len(https_receiver.requests) == 40
    # kept alive: at most one connection per thread, not one per request
    assert https_receiver.connections <= 4


def _tls_server(answer):
    """A one-connection TLS server that reads the request and calls `answer(tls)`:
    (url, CA path, stop)."""
    ca, ca_path = webhook_receiver._ca()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        conn, _ = listener.accept()
        with context.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            try:
                answer(tls, stop)
            except OSError:
                pass
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"https://127.0.0.1:{listener.getsockname()[1]}/", ca_path, stop


def test_post_reads_an_answer_whose_body_ends_with_the_connection():
    url, ca_path, _ = _tls_server(lambda tls, stop: tls.sendall(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nthanks"))
    result = net.post(url, BODY, HEADERS, timeout=5, allow_private=True, ca_bundle=ca_path)
    assert (result.ok, result.status_code, result.body_snippet) == (True, 200, "thanks")


def test_post_waits_past_an_interim_answer():
    url, ca_path, _ = _tls_server(lambda tls, stop: tls.sendall(
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 204 No Content\r\n\r\n"))
    result = net.post(url, BODY, HEADERS, timeout=5, allow_private=True, ca_bundle=ca_path)
    assert (result.ok, result.status_code) == (True, 204)


@pytest.mark.parametrize("answer", [b"SSH-2.0-OpenSSH_9.2\r\n", b"HTTP/1.1 200 OK\r\nX-"])
def test_post_reports_an_answer_that_is_not_http(answer):
    url, ca_path, _ = _tls_server(lambda tls, stop: tls.sendall(answer))
    result = net.post(url, BODY, HEADERS, timeout=5, allow_private=True, ca_bundle=ca_path)
    assert (result.ok, result.status_code, result.error) == (
        False, None, "connection closed without a valid HTTP response")


def test_post_cuts_an_endless_head_long_before_the_deadline():
    def flood(tls, stop):
        tls.sendall(b"HTTP/1.1 200 OK\r\n")
        while not stop.is_set():
            tls.sendall(b"X-Flood: " + b"a" * 8000 + b"\r\n")

    url, ca_path, stop = _tls_server(flood)
    started = time.monotonic()
    result = net.post(url, BODY, HEADERS, timeout=5, allow_private=True, ca_bundle=ca_path)
    stop.set()
    assert result.error == "connection closed without a valid HTTP response"
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("headers", [{"X-Note": "a\r\nX-Injected: 1"}, {"X-A\nB": "c"}])
def test_post_refuses_a_control_character_in_the_request_head(https_receiver, trust_ca,
                                                               headers):
    result = net.post(https_receiver.url, BODY, headers, allow_private=True,
                      ca_bundle=trust_ca)
    assert not result.ok and result.error.startswith("invalid request:")
    assert https_receiver.requests == []


# --- post: SSRF guard -----------------------------------------------------------------

@pytest.mark.parametrize("host, shown", [
    ("127.0.0.1", "127.0.0.1"), ("2130706433", "127.0.0.1"),
    ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
    ("169.254.169.254", "169.254.169.254"), ("0x7f.1", "127.0.0.1"), ("[::1]", "::1"),
])
def test_post_refuses_private_literals(https_receiver, trust_ca, host, shown):
    result = net.post(f"https://{host}:{https_receiver.port}/", BODY, HEADERS,
                              ca_bundle=trust_ca)
    assert not result.ok and result.status_code is None
    assert result.error.startswith(f"refused: {shown} is a ")
    assert https_receiver.requests == []


def test_post_refuses_localhost_without_allow_private(https_receiver, trust_ca):
    result = net.post(https_receiver.localhost_url, BODY, HEADERS, ca_bundle=trust_ca)
    assert result.error.startswith("refused: localhost")
    assert https_receiver.requests == []


def test_post_refuses_a_name_resolving_to_loopback(https_receiver, trust_ca, monkeypatch):
    calls = []
    monkeypatch.setattr(net, "resolve",
                        lambda host, port: calls.append((host, port)) or ["127.0.0.1"])
    result = net.post(f"https://rebind.example.test:{https_receiver.port}/", BODY,
                              HEADERS, ca_bundle=trust_ca)
    assert result.error == ("refused: rebind.example.test resolves to 127.0.0.1 "
                            "(loopback address)")
    assert calls == [("rebind.example.test", https_receiver.port)]
    assert https_receiver.requests == []


@pytest.mark.parametrize("address, reason", [
    ("10.0.0.5", "private address"), ("169.254.169.254", "link-local address"),
    ("fd00:ec2::254", "private address"), ("100.64.0.1", "shared (CGNAT) address"),
    ("::ffff:169.254.169.254", "link-local address"), ("224.0.0.1", "multicast address"),
    ("0.0.0.0", "unspecified address"), ("fe80::1%eth0", "link-local address"),
])
def test_post_refuses_names_resolving_to_non_public_addresses(monkeypatch, address, reason):
    monkeypatch.setattr(net, "resolve", lambda host, port: [address])
    result = net.post("https://hooks.example.test/", BODY, HEADERS)
    assert not result.ok
    assert result.error.startswith("refused: hooks.example.test resolves to ")
    assert result.error.endswith(f"({reason})")


def test_post_refuses_when_any_resolved_address_is_private(monkeypatch):
    monkeypatch.setattr(net, "resolve",
                        lambda host, port: ["93.184.216.34", "192.168.0.10"])
    result = net.post("https://mixed.example.test/", BODY, HEADERS)
    assert result.error == ("refused: mixed.example.test resolves to 192.168.0.10 "
                            "(private address)")


def test_post_connects_only_to_the_address_it_resolved_once(
        https_receiver, trust_ca, monkeypatch):
    """DNS rebinding: one resolution, and the connection goes to that address (the
    socket module's own resolver is never asked for the name again)."""
    calls = []
    monkeypatch.setattr(net, "resolve",
                        lambda host, port: calls.append(host) or ["127.0.0.1"])
    real_getaddrinfo = net.socket.getaddrinfo

    def guarded_getaddrinfo(host, *args, **kwargs):
        assert host != "localhost", "the name was resolved a second time"
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(net.socket, "getaddrinfo", guarded_getaddrinfo)
    for _ in range(2):
        result = net.post(https_receiver.localhost_url + "/once", BODY, HEADERS,
                                  allow_private=True, ca_bundle=trust_ca)
        assert result.ok, result.error
    assert calls == ["localhost", "localhost"]  # one resolution per send
    assert [r.path for r in https_receiver.requests] == ["/once", "/once"]


def test_post_tries_the_next_checked_address_when_one_refuses(https_receiver, trust_ca,
                                                               monkeypatch):
    monkeypatch.setattr(net, "resolve", lambda host, port: ["127.0.0.2", "127.0.0.1"])
    result = net.post(https_receiver.localhost_url, BODY, HEADERS,
                              allow_private=True, ca_bundle=trust_ca)
    assert result.ok, result.error


def test_post_dns_failure_is_a_result(monkeypatch):
    def fail(host, port):
        raise net.socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(net, "resolve", fail)
    result = net.post("https://nowhere.example.test/", BODY, HEADERS)
    assert not result.ok and result.status_code is None
    assert result.error.startswith("DNS lookup failed for nowhere.example.test")


def test_post_invalid_url_is_a_result():
    result = net.post("http://example.com/", BODY, HEADERS)
    assert not result.ok and result.error == "invalid URL: the URL must use https"


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nX-Slow: "])
def test_post_total_time_is_bounded_against_a_slow_drip(head):
    """A receiver that answers one byte at a time, each well inside the read timeout,
    is still cut at the deadline (headers or body)."""
    def drip(tls, stop):
        tls.sendall(head)
        while not stop.wait(0.1):
            tls.sendall(b"x")

    url, ca_path, stop = _tls_server(drip)
    started = time.monotonic()
    result = net.post(url, BODY, HEADERS, timeout=1, allow_private=True, ca_bundle=ca_path)
    elapsed = time.monotonic() - started
    stop.set()
    assert result.error == "timed out after 1 s"
    assert elapsed < 2.5


def test_closed_receiver_refuses_even_kept_alive_connections(https_receiver, trust_ca):
    assert net.post(https_receiver.url, BODY, HEADERS, allow_private=True,
                            ca_bundle=trust_ca).ok
    https_receiver.close()
    result = net.post(https_receiver.url, BODY, HEADERS, allow_private=True,
                              ca_bundle=trust_ca)
    assert (result.ok, result.status_code, result.error) == (False, None,
                                                             "connection refused")
    assert len(https_receiver.requests) == 1
