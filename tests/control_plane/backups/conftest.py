"""Backups without an agent: the agent's side is played by the services the
gateway calls (acknowledge, result) and by HTTP calls to the transfer API with
the server's credential; storage is a recording fake (the storage backends have
their own contract tests)."""

import datetime as dt
import hashlib
import io
import itertools
import threading

import pytest

from control_plane.infra import clock, security
from control_plane.models import AgentCommand, Backup, Environment, Server
from control_plane.services.accounts import orgs
from control_plane.services.backups import stores
from control_plane.services.tasks import engine

V1, P = "/api/v1", "/api/public/v1"
DEPLOY, CANCEL = "project.environments.deploy", "project.deployments.cancel"
_n = itertools.count()

RESULT = {"database_size": 1000, "filestore_size": 2000, "total_size": 3000,
          "compressed_size": 900, "verified": True,
          "manifest": {"format": "berth-backup/1", "erp_version": "17.0"},
          "parts": {"database.dump": {"size": 400, "sha256": "a" * 64},
                    "filestore.tar.zst": {"size": 480, "sha256": "b" * 64},
                    "manifest.json": {"size": 20, "sha256": "c" * 64}}}


class FakeStore:
    streaming = True

    def __init__(self):
        self.begun, self.completed, self.sizes, self.objects = [], {}, {}, {}
        self.aborted, self.unreachable = [], False
        self.joining = None  # (entered, release): complete_upload waits for `release`
        self.beginning = None  # (entered, release): the next begin_upload waits for it
        self.aborting = None  # (entered, release): the next abort_upload waits for it

    def holds(self, key, data):
        """What a completed upload of `key` will be read back as; returns its
        {size, sha256}."""
        self.objects[key], self.sizes[key] = data, len(data)
        return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def _slow_once(self, attribute):
        """Storage slow to answer this call: it waits to be let go (`attribute`'s
        (entered, release)), once."""
        held = getattr(self, attribute)
        if held is not None:
            setattr(self, attribute, None)
            entered, release = held
            entered.set()
            release.wait(60)

    def begin_upload(self, key):
        self._slow_once("beginning")
        upload_id = f"up-{len(self.begun)}"
        self.begun.append((key, upload_id))
        return upload_id

    def part_url(self, key, upload_id, part_number, expires=3600):
        return f"https://store.test/put/{key}?upload={upload_id}&part={part_number}&ttl={expires}"

    def complete_upload(self, key, upload_id, parts):
        if self.joining is not None:  # a store taking its time to join a large object
            entered, release = self.joining
            entered.set()
            release.wait(60)
        self.completed[key] = (upload_id, parts)

    def abort_upload(self, key, upload_id):
        self._slow_once("aborting")
        if self.unreachable:
            raise OSError("storage unreachable")
        self.aborted.append((key, upload_id))

    def abort_uploads(self, prefix):
        if self.unreachable:
            raise OSError("storage unreachable")
        ended = {u for _, u in self.aborted} | {u for u, _ in self.completed.values()}
        left = [(k, u) for k, u in self.begun if k.startswith(prefix) and u not in ended]
        self.aborted += left
        return len(left)

    def size(self, key):
        return self.sizes.get(key)

    def open(self, key):
        if key not in self.objects:
            raise FileNotFoundError(key)
        return io.BytesIO(self.objects[key])

    def get_url(self, key, expires=3600, filename=None):
        return f"https://store.test/get/{key}?ttl={expires}&filename={filename}"


def while_storage_waits(store, attribute, slow, meanwhile):
    """`slow()` on a thread while the store's next call of the kind holds on
    (`attribute`: "joining", "beginning" or "aborting"); `meanwhile()` run here in the
    meantime.
    Returns (slow's result, meanwhile's result, whether meanwhile's answer came
    before the store's call was let go)."""
    entered, release = threading.Event(), threading.Event()
    setattr(store, attribute, (entered, release))
    done = {}
    thread = threading.Thread(target=lambda: done.update(r=slow()))
    thread.start()
    timer = threading.Timer(10, release.set)  # a lock held across the call waits this long
    try:
        assert entered.wait(30)
        timer.start()
        answer = meanwhile()
        before = not release.is_set()
    finally:
        release.set()
        timer.cancel()
        thread.join(60)
    return done["r"], answer, before


@pytest.fixture
def store(monkeypatch):
    fake = FakeStore()
    monkeypatch.setattr(stores, "for_settings", lambda settings: fake)
    return fake


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


class Bk:
    """An organization with a server (and its agent's credential), a project, a
    running environment, a user who may deploy and API keys."""

    def __init__(self, world):
        self.world = world
        self.org = world.org()
        self.server, self.credential = self.new_server()
        self.project = world.project(self.org, self.server)
        self.env = self.environment()
        self.user = world.user(self.org, permissions=(DEPLOY, CANCEL))
        self.h = bearer(orgs.issue_user_token(self.user.id))
        self.key = bearer(world.key(self.org)[0])
        self.ro_key = bearer(world.key(self.org, key_type="read_only")[0])

    def new_server(self):
        server = self.world.server(self.org)
        credential = f"agt_live_{next(_n):040d}"
        Server.update(agent_credential_hash=security.digest(credential)).where(
            Server.id == server.id).execute()
        return server, bearer(credential)

    def environment(self, status="running", server=None, project=None):
        return Environment.create(project=project or self.project, server=server or self.server,
                                  name=f"env-{next(_n)}", status=status, branch="main")

    def backup_via_api(self, client, env=None, **body):
        r = client.post(f"{V1}/environments/{(env or self.env).id}/backups", headers=self.h,
                        json=body)
        assert r.status_code == 202, r.json
        return Backup.get_by_id(r.json["id"])

    def command(self, task_id):
        return AgentCommand.get(AgentCommand.deployment == task_id)

    def ack(self, task_id, server=None):
        engine.record_ack((server or self.server).id, self.command(task_id).id)

    def finish(self, task_id, ok=True, result=None, error=None, server=None):
        engine.record_result((server or self.server).id, self.command(task_id).id, ok,
                                RESULT if result is None and ok else result, error)

    def completed_backup(self, client, env=None, server=None):
        backup = self.backup_via_api(client, env)
        self.ack(backup.task_id, server)
        self.finish(backup.task_id, server=server)
        return Backup.get_by_id(backup.id)


@pytest.fixture
def at():
    """at(when): the control plane's clock stands at `when` (the wall clock until set)."""
    now = {}
    clock.set_source(lambda: now.get("t") or dt.datetime.now(dt.UTC).replace(tzinfo=None))
    yield lambda when: now.update(t=when)
    clock.set_source(None)


@pytest.fixture
def bk(world):
    return Bk(world)
