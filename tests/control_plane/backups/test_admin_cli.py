"""`berth admin backup list|create|restore` through the real console script."""

from control_plane.models import AgentCommand, Backup
from control_plane.services.tasks import engine
from tests.control_plane.backups.conftest import RESULT
from tests.control_plane.test_admin_cli import data_dir, fails, ok  # noqa: F401 - fixture

BACKUP_KEYS = {"id", "environment_id", "task_id", "backup_type", "status", "database_size",
               "filestore_size", "total_size", "compressed_size", "duration_seconds",
               "is_verified", "notes", "error_message", "created_at", "started_at",
               "completed_at", "verified_at", "expires_at"}


def test_list_create_restore(data_dir):  # noqa: F811
    from control_plane.app import create_app
    from control_plane.infra import migrate
    from tests.conftest import World

    app = create_app({})  # settings from CP_DATA_DIR only, like the CLI
    migrate.upgrade(app.extensions["berth"].db)
    world = World(app)
    project = world.project(world.org())
    env = world.environment(project)

    created = ok(data_dir, "backup", "create", "--environment", env.id, "--comment", "by hand",
                 keys=BACKUP_KEYS)
    assert (created["status"], created["backup_type"], created["notes"]) == (
        "pending", "manual", "by hand")
    assert "already pending or running" in fails(data_dir, "backup", "create",
                                                 "--environment", env.id)
    command = AgentCommand.get(AgentCommand.deployment == created["task_id"])
    assert command.kind == "backup" and command.payload["backup_id"] == created["id"]
    engine.record_result(env.server_id, command.id, True, RESULT)

    page = ok(data_dir, "backup", "list", "--environment", env.id,
              keys={"items", "total", "page", "page_size", "total_pages"})
    assert page["total"] == 1 and page["items"][0]["status"] == "completed"
    assert set(page["items"][0]) == BACKUP_KEYS

    # A moment: outside the window (no base backup here) it says which window.
    assert "point-in-time window, empty" in fails(
        data_dir, "backup", "restore", "--environment", env.id, "--at", "2026-12-01T09:41:00Z")
    assert "--backup, or --at" in fails(data_dir, "backup", "restore", "--environment", env.id)
    restored = ok(data_dir, "backup", "restore", "--environment", env.id, "--backup",
                  created["id"], keys={"task_id", "kind", "status", "environment_id",
                                       "backup_id", "target_time", "neutralize",
                                       "neutralize_profile", "anonymize", "safety_backup"})
    assert restored["backup_id"] == created["id"] and restored["target_time"] is None
    assert restored["kind"] == "restore" and restored["status"] == "pending"
    assert restored["safety_backup"]["notes"].startswith("Safety backup before restore")
    assert Backup.select().count() == 2
    assert "not found" in fails(data_dir, "backup", "list", "--environment",
                                "0" * 32).lower()
    assert "completed" in fails(data_dir, "backup", "restore", "--environment", env.id,
                                "--backup", restored["safety_backup"]["id"])


def test_export_then_its_url(data_dir):  # noqa: F811
    from control_plane.app import create_app
    from control_plane.infra import migrate
    from tests.conftest import World

    app = create_app({})
    migrate.upgrade(app.extensions["berth"].db)
    world = World(app)
    env = world.environment(world.project(world.org()))
    created = ok(data_dir, "backup", "create", "--environment", env.id)
    assert "completed" in fails(data_dir, "backup", "export", "--backup", created["id"])
    command = AgentCommand.get(AgentCommand.deployment == created["task_id"])
    engine.record_result(env.server_id, command.id, True, RESULT)
    assert "not exported yet" in fails(data_dir, "backup", "export-url", "--backup",
                                       created["id"])

    started = ok(data_dir, "backup", "export", "--backup", created["id"],
                 keys={"task_id", "kind", "status", "environment_id", "backup_id"})
    assert (started["kind"], started["status"], started["backup_id"]) == (
        "export", "pending", created["id"])
    command = AgentCommand.get(AgentCommand.deployment == started["task_id"])
    assert command.kind == "export" and command.payload["backup_id"] == created["id"]
    assert "already pending or running" in fails(data_dir, "backup", "export", "--backup",
                                                 created["id"])
    assert "being exported" in fails(data_dir, "backup", "export-url", "--backup",
                                     created["id"])
    row = Backup.get_by_id(created["id"])  # as the agent's upload of the zip records it
    Backup.update(parts={**row.parts, "odoo-export.zip": {"size": 42, "sha256": "e" * 64}}
                  ).where(Backup.id == row.id).execute()
    engine.record_result(env.server_id, command.id, True, {"object": "odoo-export.zip"})

    link = ok(data_dir, "backup", "export-url", "--backup", created["id"], "--expires-in",
              "600", keys={"url", "expires_at", "filename", "size", "use_streaming"})
    assert "/storage/v1/" in link["url"] and link["filename"].endswith(".zip")
    assert link["size"] == 42 and link["use_streaming"] is True
    assert link["expires_at"].endswith("Z")
    assert fails(data_dir, "backup", "export-url", "--backup", created["id"],
                 "--expires-in", "5")
    assert "not found" in fails(data_dir, "backup", "export", "--backup", "0" * 32).lower()
