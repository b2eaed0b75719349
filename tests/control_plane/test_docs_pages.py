"""The API docs pages (Swagger UI, ReDoc) work on a control plane without internet
access: a real `berth serve`, headless Chromium with every name outside this
machine unresolvable, the operations rendered, and no request the page made left
the server's origin. The assets ship in the wheel, not read from the source tree."""

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
import requests

from tests.support.serve import Served

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGES = ("/api/public/v1/docs", "/api/public/v1/redoc")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("docs") / "data").start()
    yield s
    s.stop()


def _references(html):
    return re.findall(r'<(?:script|link|img)\b[^>]*?\b(?:src|href)="([^"]*)"', html)


@pytest.mark.parametrize("page", PAGES)
def test_docs_page_loads_only_its_own_origins_assets(served, page):
    r = requests.get(served.url + page, timeout=10)
    assert r.status_code == 200
    assert '<meta charset="utf-8">' in r.text
    assert "<script>" not in r.text  # no inline script: the policy below forbids it
    csp = dict(part.strip().split(" ", 1) for part in
               r.headers["Content-Security-Policy"].split(";"))
    assert csp["script-src"] == "'self'" and csp["default-src"] == "'none'"
    refs = _references(r.text)
    assert refs and all(ref.startswith("/") and not ref.startswith("//") for ref in refs), refs
    for ref in refs:  # each one served, by the control plane itself
        asset = requests.get(urljoin(served.url, ref), timeout=10)
        assert asset.status_code == 200 and asset.content, ref


def _chromium(url, profile, netlog):
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}",
         # Nothing but this machine resolves: a page needing the internet fails.
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
         f"--log-net-log={netlog}", "--virtual-time-budget=20000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _page_requests(netlog, origin):
    """URLs the page asked for: requests whose initiator is the page's origin, and
    the navigation itself (the browser's own update checks have no initiator)."""
    log = json.loads(Path(netlog).read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = set()
    for event in log["events"]:
        params = event.get("params") or {}
        if event["type"] == start and (params.get("initiator") == origin
                                       or params.get("url", "").startswith(origin + "/")):
            urls.add(params["url"])
    return urls


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test installs it)")
@pytest.mark.parametrize("page", PAGES)
def test_docs_page_renders_the_operations_offline_in_a_browser(served, page, tmp_path):
    origin = f"{urlsplit(served.url).scheme}://{urlsplit(served.url).netloc}"
    dom = _chromium(served.url + page, tmp_path / "profile", tmp_path / "net.json")
    # Rendered by the page's scripts, from the document: not in the served HTML.
    for text in ("/api/public/v1/projects/{project_id}/environments",
                 "/api/public/v1/webhooks/{webhook_id}/rotate-secret",
                 "List the active projects the key can see"):
        assert text in dom, (page, text)
    asked = _page_requests(tmp_path / "net.json", origin)
    assert served.url + "/api/public/v1/openapi.json" in asked
    assert all(url.startswith(origin + "/") for url in asked), asked


@pytest.mark.slow
def test_docs_assets_ship_in_the_wheel_and_serve_from_an_install(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                    "--no-build-isolation", "--quiet", "-w", str(tmp_path / "dist")],
                   check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("berth-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"control_plane/docs_ui/static/swagger-ui/swagger-ui-bundle.js",
            "control_plane/docs_ui/static/swagger-ui/LICENSE",
            "control_plane/docs_ui/static/redoc/redoc.standalone.js",
            "control_plane/docs_ui/static/redoc/LICENSE",
            "control_plane/docs_ui/templates/docs_ui/swagger_ui.html"} <= names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
                    "--target", str(site), str(wheel)], check=True, capture_output=True)
    # The installed copy, run from elsewhere, serves both pages and their assets.
    probe = """
import sys, tempfile
from control_plane.app import create_app
import control_plane
assert control_plane.__file__.startswith(sys.argv[1]), control_plane.__file__
client = create_app({"DATA_DIR": tempfile.mkdtemp(), "SECRET_KEY": "x"}).test_client()
for path in ("/api/public/v1/docs", "/api/public/v1/redoc",
             "/docs-assets/swagger-ui/swagger-ui-bundle.js", "/docs-assets/swagger-init.js",
             "/docs-assets/redoc/redoc.standalone.js"):
    r = client.get(path)
    assert r.status_code == 200 and len(r.data) > 300, (path, r.status_code)
    r.close()
"""
    out = subprocess.run([sys.executable, "-c", probe, str(site)], cwd=tmp_path,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
