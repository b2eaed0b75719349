"""`berthctl size` against the real `berth serve`: what the agent last said an
environment's size is made of (arranged in the control plane's database, as the
gateway stores an agent's report: no agent here), as a table and as the API's JSON.
The measurement on real containers: tests/agent/test_disk_measurement.py."""

import json
import time

from control_plane.app import create_app
from control_plane.models import Backup, Organization
from control_plane.services.servers import monitoring
from tests.berthctl.conftest import berthctl, clean_env, no_traceback
from tests.conftest import World

MB = 1024 * 1024


def _measured(served):
    world = World(create_app({"DATA_DIR": served.env["CP_DATA_DIR"], "PROXY_IMAGE": ""}))
    env = world.environment(world.project(Organization.get_by_id(served.org)))
    monitoring.record_disk_usage(env.server_id, [{
        "environment_id": str(env.id), "measured_at_unix_ms": int(time.time() * 1000),
        "database_bytes": 40 * MB, "filestore_bytes": 3 * MB, "addons_bytes": 1024,
        "made_of": {"largest_tables": [{"name": "ir_attachment", "bytes": 9 * MB, "rows": 1200},
                                       {"name": "res_partner", "bytes": MB, "rows": -1}],
                    "filestore_files": 7, "attachments_missing": 2, "files_orphaned": 1,
                    "missing_sample": ["ab/ab01", "cd/cd02"]}}])
    Backup.create(environment=env, status="completed", backup_type="manual",
                  storage_prefix=f"backups/{env.id}/x/", total_size=5 * MB,
                  compressed_size=2 * MB)
    return str(env.id)


def test_size_as_a_table_and_as_json(served, tmp_path):
    env = clean_env(tmp_path, BERTH_URL=served.url, BERTH_API_KEY=served.keys["read_only"])
    env_id = _measured(served)
    r = berthctl("size", env_id, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "database   40.0 MiB" in lines and "filestore  3.0 MiB in 7 files" in lines
    assert "attachments missing their file: 2 (ab/ab01, cd/cd02)" in lines
    assert "files no attachment names: 1" in lines
    assert any(line.split() == ["ir_attachment", "9.0", "MiB", "1200"] for line in lines)
    assert any(line.split() == ["res_partner", "1.0", "MiB", "-"] for line in lines)
    assert any(line.endswith("5.0 MiB  2.0 MiB") for line in lines)

    r = berthctl("-o", "json", "size", env_id, env=env)
    body = json.loads(r.stdout)
    assert body["attachments_missing"] == 2 and body["growth"] is None
    assert [b["compressed_size"] for b in body["backups"]] == [2 * MB]

    r = berthctl("size", "not-an-id", env=env)
    assert r.returncode == 2 and "ENV_ID" in r.stderr
    no_traceback(r)
