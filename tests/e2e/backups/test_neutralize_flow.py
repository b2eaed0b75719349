"""Restored copies neutralised, end to end (the stand of tests/support/backup_flow.py
on local storage: a real control plane over HTTP, a real `berth-agent run`, real
containers of the ERP stand-in, which follows `odoo neutralize -d DB`).

Production holds a live mail server and scheduled actions. Its backup restored
into staging is neutralised before the copy serves: mail servers off and a dummy
one, every scheduled action off but the autovacuum, `database.is_neutralized`
set, shown as `neutralized: true`. Restored into production it is untouched.
`"neutralize": false` keeps the copy live and the task log says who asked. A
neutralisation that fails fails the restore, and staging is put back as it was."""

import pytest

from control_plane.models import Event
from tests.support.backup_flow import (
    V1,
    P,
    completed_backup,
    notes,
    production_and_staging,
    psql,
    set_notes,
    settled,
    task_log,
)

LIVE = [(1, "invoice 2026/001")]
STAGING = [(9, "staging only")]


def restore(client, s, env_id, backup_id, **body):
    r = client.post(f"{V1}/environments/{env_id}/restore", headers=s.user,
                    json={"backup_id": backup_id, **body})
    assert r.status_code == 202, r.json
    return settled(client, s, r.json["id"])


def mail_servers(s, env_id):
    return psql(s, env_id, "SELECT name, smtp_host, active FROM ir_mail_server ORDER BY id")


def crons(s, env_id):
    return psql(s, env_id, "SELECT name, active FROM ir_cron ORDER BY id")


def flag(s, env_id):
    return psql(s, env_id, "SELECT coalesce((SELECT value FROM ir_config_parameter"
                           " WHERE key = 'database.is_neutralized'), 'absent')")


def shown(client, s, env_id):
    env = client.get(f"{P}/environments/{env_id}", headers=s.reader).json
    status = client.get(f"{P}/environments/{env_id}/status", headers=s.reader).json
    assert env["neutralized"] == status["neutralized"]
    return env["neutralized"]


@pytest.mark.parametrize("stand", ["local"], indirect=True)
def test_restored_copies_are_neutralised(client, stand):
    s = stand
    prod, staging = production_and_staging(client, s)
    set_notes(s, prod, LIVE)
    psql(s, prod, "INSERT INTO ir_mail_server (name, smtp_host) VALUES"
                  " ('customers', 'smtp.example.com');"
                  " INSERT INTO ir_cron (name) VALUES ('Invoices: send reminders')")
    live_mail, live_crons = mail_servers(s, prod), crons(s, prod)
    assert live_mail == "customers|smtp.example.com|t"
    assert live_crons.count("|t") == 3  # the stand-in's two and ours, all active
    backup = completed_backup(client, s, prod)["id"]
    assert shown(client, s, staging) is None  # nothing read yet

    # 1. Into staging (the default): neutralised before it served.
    set_notes(s, staging, STAGING)
    done = restore(client, s, staging, backup)
    assert done["status"] == "success", done
    assert notes(s, staging) == LIVE
    assert mail_servers(s, staging).splitlines() == [
        "customers|smtp.example.com|f", "neutralization - disable emails|invalid|t"]
    assert crons(s, staging).splitlines() == [
        "Base: Auto-vacuum internal data|t", "Mail: Email Queue Manager|f",
        "Invoices: send reminders|f"]
    assert flag(s, staging) == "true" and shown(client, s, staging) is True
    log = task_log(client, s, staging, done["id"])
    assert "odoo neutralize -d" in log and "Neutralization finished" in log
    event = Event.select().where(Event.name == "restore.completed").order_by(
        Event.created_at.desc()).first()
    assert event.data["task_id"] == done["id"] and event.data["neutralized"] is True
    assert not s.envs._container(s.envs._names(staging)["erp"] + "-neutralize")
    # production itself is as it was
    assert mail_servers(s, prod) == live_mail and crons(s, prod) == live_crons

    # 2. Into production: never neutralised.
    done = restore(client, s, prod, backup)
    assert done["status"] == "success", done
    assert mail_servers(s, prod) == live_mail and crons(s, prod) == live_crons
    assert flag(s, prod) == "absent" and shown(client, s, prod) is False
    assert "neutraliz" not in task_log(client, s, prod, done["id"]).lower()

    # 3. `"neutralize": false`: the copy stays live, and the log says who asked.
    done = restore(client, s, staging, backup, neutralize=False)
    assert done["status"] == "success", done
    assert mail_servers(s, staging) == live_mail and crons(s, staging) == live_crons
    assert flag(s, staging) == "absent" and shown(client, s, staging) is False
    log = task_log(client, s, staging, done["id"])
    assert '"neutralize": false' in log and "odoo neutralize" not in log

    # 4. A neutralisation that fails (a schema it cannot update) fails the restore;
    # staging is put back as it was, its ERP serving again.
    psql(s, prod, "DROP TABLE ir_mail_server; CREATE VIEW ir_mail_server AS"
                  " SELECT 1 AS id, 'x'::varchar AS name, 'h'::varchar AS smtp_host,"
                  " 25 AS smtp_port, true AS active GROUP BY 1")
    broken = completed_backup(client, s, prod)["id"]
    set_notes(s, staging, STAGING)
    done = restore(client, s, staging, broken)
    assert done["status"] == "failed", done
    assert "neutralize" in done["error_message"] and "put back" in done["error_message"]
    assert notes(s, staging) == STAGING and mail_servers(s, staging) == live_mail
    assert "not neutralized" in task_log(client, s, staging, done["id"])
    assert client.get(f"{P}/environments/{staging}", headers=s.reader).json["status"] == \
        "running"
    assert shown(client, s, staging) is False  # the failed restore changed nothing shown
