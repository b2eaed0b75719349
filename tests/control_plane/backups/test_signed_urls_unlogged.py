"""A signed storage URL is the permission itself (no header): whoever reads the
log must not find one. A real `berth serve` on the test's database answers the
public download route; its links are fetched (and a part uploaded, and a link
misused: refused answers are logged too), then the whole log output, every
level, is searched for the tokens."""

import uuid

import pytest
import requests

from control_plane import storage
from control_plane.models import Backup
from tests.support.serve import Served

pytestmark = pytest.mark.slow

P = "/api/public/v1"


@pytest.fixture
def served(app, tmp_path):
    env = {"CP_SECRET_KEY": app.config["SECRET_KEY"]}
    if app.config["DATABASE_URL"]:  # PostgreSQL; else the SQLite file in the data dir
        env["CP_DATABASE_URL"] = app.config["DATABASE_URL"]
    s = Served(app.config["DATA_DIR"], env)
    s.start()
    yield s
    if s.proc.poll() is None:
        s.stop()


def _token(url):
    return url.rsplit("/", 1)[1]


def test_no_signed_url_reaches_the_log(app, served, bk):
    store = storage.from_settings({**app.config, "PUBLIC_URL": served.url})
    backup = Backup.create(environment=bk.env, status="completed", backup_type="manual",
                           storage_prefix=f"backups/{bk.env.id}/{uuid.uuid4()}/")
    secrets = []
    for name in ("database.dump", "filestore.tar.zst", "manifest.json"):
        key = backup.storage_prefix + name
        upload_id = store.begin_upload(key)
        part_url = store.part_url(key, upload_id, 1)
        secrets.append(_token(part_url))
        answer = requests.put(part_url, data=name.encode(), timeout=10)
        assert answer.status_code == 200, answer.text
        again = requests.put(part_url, data=b"x", timeout=10)  # spent: refused
        assert again.status_code == 403
        store.complete_upload(key, upload_id, [(1, answer.headers["ETag"])])

    r = requests.get(f"{served.url}{P}/backups/{backup.id}/download", headers=bk.ro_key,
                     timeout=10)
    assert r.status_code == 200, r.text
    links = [r.json()[f"{n}_url"] for n in ("database", "filestore", "manifest")]
    for link in links:
        secrets.append(_token(link))
        got = requests.get(link, timeout=10)
        assert got.status_code == 200 and got.content
        # Mistyped forms of a good link still carry its token: unmatched routes,
        # a wrong method, a query string.
        assert requests.get(link + "/", timeout=10).status_code == 404
        assert requests.post(link, timeout=10).status_code == 405
        assert requests.get(link + "?a=1", timeout=10).status_code == 200

    log = served.stop()
    assert "berth.access" in log  # the access log is on
    assert log.count("/storage/v1/") >= 3 * 5  # the requests are logged...
    for secret in secrets:  # ...but not their tokens (nor a tell-tale part of one)
        assert secret not in log
        assert secret[-27:] not in log  # the signature
