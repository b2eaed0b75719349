"""HTTP to the two APIs, standard library only: the public API (`/api/public/v1`,
an API key) and the deployment-operations API (`/api/v1`, a user token).
Every failure becomes a CliError with its exit code, never a traceback."""

import json
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

from berthctl import __version__
from berthctl.errors import AUTH, ApiError, CliError, NetworkError

PUBLIC, OPS = "/api/public/v1", "/api/v1"
TIMEOUT = 60  # seconds; destroy and restore answer only once the server has
MAX_RATE_WAIT = 65  # a 429's Retry-After is waited out up to a window's length
USER_AGENT = f"berthctl/{__version__}"


class Client:
    def __init__(self, url, api_key=None, user_token=None, timeout=TIMEOUT):
        self.url = url.rstrip("/")
        self.api_key, self.user_token, self.timeout = api_key, user_token, timeout
        self.rate = None  # (limit, remaining) of the key, from the last answer

    # --- the two surfaces --------------------------------------------------------

    def get(self, path, **params):
        return self.request("GET", path, params=params)

    def post(self, path, body=None):
        return self.request("POST", path, body=body)

    def ops(self, method, path, params=None, body=None):
        """The operations API: only where the public one has no equivalent."""
        if not self.user_token:
            raise CliError("This command uses the deployment-operations API, which needs a "
                           "user token: run `berthctl login --user-token` or set "
                           "BERTH_USER_TOKEN.", AUTH)
        return self.request(method, path, params=params, body=body, api=OPS)

    def request(self, method, path, params=None, body=None, headers=None, api=PUBLIC):
        if api == PUBLIC and not self.api_key:
            raise CliError("Not logged in: run `berthctl login` or set BERTH_URL and "
                           "BERTH_API_KEY.", AUTH)
        token = self.api_key if api == PUBLIC else self.user_token
        headers = {"Authorization": f"Bearer {token}", **(headers or {})}
        if method == "POST" and api == PUBLIC:
            # A retried create or action (after a 429) is then never done twice.
            headers.setdefault("X-Idempotency-Key", str(uuid.uuid4()))
        retry = method == "GET" or "X-Idempotency-Key" in headers
        url = self.url + api + path + _query(params)
        waited = 0
        while True:
            try:
                return self._once(method, url, body, headers)
            except ApiError as err:
                delay = err.retry_after or 1
                if not (retry and err.status == 429 and waited + delay <= MAX_RATE_WAIT):
                    raise
                print(f"berthctl: rate limited, retrying in {delay}s", file=sys.stderr)
                time.sleep(delay)
                waited += delay

    def _once(self, method, url, body, headers):
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers = {**headers, "Content-Type": "application/json"}
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Accept": "application/json",
                                              "User-Agent": USER_AGENT, **headers})
        try:
            with _OPENER.open(req, timeout=self.timeout) as resp:
                self._note_rate(resp.headers)
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            self._note_rate(err.headers)
            raise _api_error(err.code, _read(err), err.headers) from None
        except (TimeoutError, urllib.error.URLError, OSError) as err:
            raise NetworkError(f"Cannot reach {self.url}: {_reason(err)}") from None
        if status == 204 or not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise NetworkError(f"The server at {self.url} did not answer with JSON "
                               f"(HTTP {status}); is this a Berth control plane?") from None

    def _note_rate(self, headers):
        try:
            self.rate = (int(headers["X-RateLimit-Limit"]), int(headers["X-RateLimit-Remaining"]))
        except (KeyError, TypeError, ValueError):
            pass

    # --- downloads of presigned URLs -------------------------------------------------

    def open_download(self, url):
        """A GET without the key: the URL carries its own permission (it may be another
        host's, an object store's), so the key is never sent there."""
        if url.startswith("/"):
            url = self.url + url
        req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as err:
            raise _api_error(err.code, _read(err), err.headers) from None
        except (urllib.error.URLError, OSError) as err:
            raise NetworkError(f"Cannot download {_host(url)}: {_reason(err)}") from None


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib copies every header, `Authorization` too, to wherever a redirect
    points: a key would reach another host, or go in clear after an https URL.
    A redirect to another origin (scheme, host or port) is refused instead: it
    means the control plane is not where the URL says."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if _origin(newurl) != _origin(req.full_url):
            fp.close()
            raise NetworkError(f"{_host(req.full_url)} redirected to {_host(newurl)} "
                               f"(HTTP {code}); the credentials are not sent to another "
                               "origin. If the control plane is there, use that URL "
                               "(--url, BERTH_URL or `berthctl login`).")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


def _origin(url):
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: no origin of ours
        port = -1
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def _query(params):
    params = {k: v for k, v in (params or {}).items() if v is not None}
    return "?" + urllib.parse.urlencode(params) if params else ""


def _read(err):
    try:
        return err.read()
    except OSError:
        return b""


def _api_error(status, raw, headers):
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return ApiError(status, None, f"HTTP {status} without an API error body "
                                      "(a proxy in the way, or not a Berth control plane)")
    message = body.get("message") or "(no message)"
    details = body.get("details") or body.get("errors")
    if details:
        message += " " + json.dumps(details, sort_keys=True)
    retry_after = body.get("retry_after") or (headers.get("Retry-After") if headers else None)
    try:
        retry_after = int(float(retry_after)) if retry_after is not None else None
    except ValueError:
        retry_after = None
    return ApiError(status, body.get("error"), message, body, retry_after)


def _reason(err):
    reason = getattr(err, "reason", None) or err
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timed out"
    text = getattr(reason, "strerror", None) or str(reason)
    return text or type(reason).__name__


def _host(url):
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
