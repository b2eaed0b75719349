"""Restored copies neutralised, end to end (the stand of tests/support/backup_flow.py
on local storage: a real control plane over HTTP, a real `berth-agent run`, real
containers of the ERP stand-in, which follows `odoo neutralize -d DB`).

Production holds a live mail server and scheduled actions. Its backup restored
into staging is neutralised before the copy serves: mail servers off and a dummy
one, every scheduled action off but the autovacuum, `database.is_neutralized`
set, shown as `neutralized: true`. Restored into production it is untouched.
The copy's mail goes to its server's mail catcher and is read through the API.
`"neutralize": false` keeps the copy live and the task log says who asked. A
neutralisation that fails fails the restore, and staging is put back as it was."""

import base64
import json
import urllib.error
import urllib.request

import pytest

from agent.deploy.environments import erp_address
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


def send_mail(s, env_id, **body):
    """The ERP sends a mail as Odoo would (the stand-in's /berth/send-mail)."""
    address = erp_address(s.envs.docker, s.envs._names(env_id)["erp"])
    request = urllib.request.Request(f"http://{address}/berth/send-mail", method="POST",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def caught_in_staging(client, s, staging, prod):
    """The neutralised copy's invoice e-mail is caught on its server and read through
    the API; production has no catcher."""
    invoice = base64.b64encode(b"%PDF-1.4 invoice").decode()
    status, sent = send_mail(s, staging, to=["ada@customer.example"], subject="Invoice 2026/001",
                             body="Dear Ada, your invoice is attached.",
                             html="<p>Dear Ada, your <b>invoice</b> is attached.</p>",
                             attachments=[{"name": "INV_2026_001.pdf",
                                           "content_base64": invoice}])
    assert status == 200 and sent["via"] == "ir_mail_server", sent
    assert sent["server"].startswith("host.docker.internal:")
    r = client.get(f"{P}/environments/{staging}/mails", headers=s.reader)
    assert r.status_code == 200, r.json
    mail, reset = r.json["mails"]  # newest first
    assert (mail["subject"], mail["to"]) == ("Invoice 2026/001", "ada@customer.example")
    assert reset["subject"] == "Password reset"
    assert mail["attachments"] == [{"name": "INV_2026_001.pdf", "size": 16}]
    whole = client.get(f"{P}/environments/{staging}/mails/{mail['id']}", headers=s.reader).json
    assert whole["text"].startswith("Dear Ada") and "<b>invoice</b>" in whole["html"]
    assert {"name": "Subject", "value": "Invoice 2026/001"} in whole["headers"]
    r = client.get(f"{P}/environments/{prod}/mails", headers=s.reader)
    assert r.status_code == 409 and r.json["error"] == "no_mail_catcher"


def shown(client, s, env_id):
    env = client.get(f"{P}/environments/{env_id}", headers=s.reader).json
    status = client.get(f"{P}/environments/{env_id}/status", headers=s.reader).json
    assert env["neutralized"] == status["neutralized"]
    return env["neutralized"]


@pytest.mark.parametrize("stand", ["local"], indirect=True)
def test_restored_copies_are_neutralised(client, stand):
    s = stand
    prod, staging = production_and_staging(client, s)
    # Before any copy: staging's ERP has no mail server of its own and sends through
    # the configured one, the catcher; production's goes out (here: nowhere to go).
    status, sent = send_mail(s, staging, to=["qa@example.com"], subject="Password reset",
                             body="Reset your password")
    assert status == 200 and sent["via"] == "config", sent
    status, sent = send_mail(s, prod, to=["qa@example.com"], subject="Not caught", body="-")
    assert status == 502 and not sent["server"].startswith("host.docker.internal"), sent
    (reset,) = client.get(f"{P}/environments/{staging}/mails", headers=s.reader).json["mails"]
    assert reset["subject"] == "Password reset" and reset["attachments"] == []
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
    # The dummy mail server points at the agent's mail catcher, not at `invalid`.
    assert mail_servers(s, staging).splitlines() == [
        "customers|smtp.example.com|f",
        "neutralization - disable emails|host.docker.internal|t"]
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
    caught_in_staging(client, s, staging, prod)

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


# --- copies that check themselves, by profile, and anonymised copies -------------

PEOPLE = [("Ada Lovelace", "ada@analytical.example", "+44 20 7946 0001", "12 St James Square"),
          ("Grace Hopper", "grace@cobol.example", "+1 202 555 0143", "1 Navy Yard")]
SECRETS = ["gmail-client-secret-7f3a", "module-api-token-91c2", "smtp-password-55d0",
           "imap-password-2b8e", "stripe-secret-key-c0de", "carrier-password-a11e",
           "user-api-key-9e9e"]


def _live_production(s, prod):
    """Production with people in it, every kind of live integration and credentials."""
    people = " ".join(
        f"WITH p AS (INSERT INTO res_partner (name, email, phone, street, city) VALUES "
        f"('{name}', '{email}', '{phone}', '{street}', 'London') RETURNING id) "
        f"INSERT INTO res_users (login, partner_id, password) SELECT '{email}', id, "
        f"'$pbkdf2$hash' FROM p;" for name, email, phone, street in PEOPLE)
    psql(s, prod, people + f"""
        INSERT INTO mail_message (subject, body, email_from, record_name) VALUES
            ('Invoice for {PEOPLE[0][0]}', '<p>Dear {PEOPLE[0][0]}, ...</p>',
             '{PEOPLE[0][1]}', '{PEOPLE[1][0]}');
        INSERT INTO ir_mail_server (name, smtp_host, smtp_user, smtp_pass) VALUES
            ('customers', 'smtp.example.com', 'billing', '{SECRETS[2]}');
        INSERT INTO fetchmail_server (name, server, "user", password) VALUES
            ('inbox', 'imap.example.com', 'billing', '{SECRETS[3]}');
        INSERT INTO payment_provider (name, code, state, secret_key) VALUES
            ('Stripe', 'stripe', 'enabled', '{SECRETS[4]}');
        INSERT INTO delivery_carrier (name, delivery_type, prod_environment, api_password)
            VALUES ('DHL', 'dhl', true, '{SECRETS[5]}');
        INSERT INTO res_users_apikeys (name, user_id, key) SELECT 'ci', id, '{SECRETS[6]}'
            FROM res_users WHERE login = '{PEOPLE[0][1]}';
        INSERT INTO ir_config_parameter (key, value) VALUES
            ('google_gmail_client_secret', '{SECRETS[0]}'),
            ('my_module.api_token', '{SECRETS[1]}'),
            ('database.secret', 'production-secret'),
            ('auth_signup.reset_password', 'True');""")


def _dump(s, env_id):
    """Every row of every table of the environment's database, as text."""
    db = s.envs._container(s.envs._names(env_id)["db"])
    code, out = db.exec_run(["pg_dump", "-U", "odoo", "--data-only", "odoo"])
    assert code == 0, out
    return out.decode()


def _param(s, env_id, key):
    return psql(s, env_id, f"SELECT coalesce((SELECT value FROM ir_config_parameter"
                           f" WHERE key = '{key}'), 'absent')")


@pytest.mark.parametrize("stand", ["local"], indirect=True)
def test_copies_check_themselves_by_profile_and_can_be_anonymised(client, stand):
    s = stand
    prod, staging = production_and_staging(client, s)
    set_notes(s, prod, LIVE)
    _live_production(s, prod)
    source = _dump(s, prod)
    needles = [n for person in PEOPLE for n in person] + SECRETS
    assert all(n in source for n in needles)  # the scan below finds what is there
    backup = completed_backup(client, s, prod)["id"]

    # 1. standard (the default): Odoo's neutralisation, checked; known credentials
    # cleared and the copy's own database.secret; personal data kept.
    done = restore(client, s, staging, backup)
    assert done["status"] == "success", done
    assert psql(s, staging, "SELECT state FROM payment_provider") == "disabled"
    assert psql(s, staging, "SELECT prod_environment FROM delivery_carrier") == "f"
    assert psql(s, staging, "SELECT active FROM fetchmail_server") == "f"
    assert _param(s, staging, "google_gmail_client_secret") == "absent"
    assert _param(s, staging, "my_module.api_token") == SECRETS[1]  # strict's, not standard's
    assert _param(s, staging, "database.secret") not in ("production-secret", "absent")
    assert _param(s, staging, "auth_signup.reset_password") == "True"  # a setting, kept
    log = task_log(client, s, staging, done["id"])
    assert "profile standard" in log and "checked the copy: nothing live" in log
    copy = _dump(s, staging)
    assert PEOPLE[0][1] in copy and SECRETS[6] in copy
    env = client.get(f"{P}/environments/{staging}", headers=s.reader).json
    assert (env["neutralized"], env["anonymized"]) == (True, False)

    # 2. The staging environment's policy: strict and anonymised, for every copy.
    r = client.put(f"{V1}/environments/{staging}/copy-policy", headers=s.user,
                   json={"profile": "strict", "anonymize": True})
    assert r.status_code == 200, r.json
    done = restore(client, s, staging, backup)
    assert done["status"] == "success", done
    copy = _dump(s, staging)
    found = [n for n in needles if n in copy]
    assert found == [], f"the anonymised strict copy still holds {found}"
    assert psql(s, staging, "SELECT login FROM res_users ORDER BY id").splitlines()[0] == "admin"
    assert psql(s, staging, "SELECT count(*) FROM res_partner WHERE email LIKE "
                            "'partner-%@example.invalid'") == "3"
    log = task_log(client, s, staging, done["id"])
    assert "profile strict" in log and "anonymised the copy (irreversible)" in log
    assert "res_partner (3 rows)" in log
    env = client.get(f"{P}/environments/{staging}", headers=s.reader).json
    assert (env["neutralized"], env["anonymized"]) == (True, True)
    event = Event.select().where(Event.name == "restore.completed").order_by(
        Event.created_at.desc()).first()
    assert (event.data["anonymized"], event.data["neutralize_profile"]) == (True, "strict")
    assert notes(s, staging) == notes(s, prod)  # the rest of the data is the copy's

    # 3. Something live left after Odoo's neutralisation (a custom module's trigger keeps
    # its mail server on): the strict copy fails, staging is put back and serves.
    psql(s, prod, "CREATE FUNCTION keep_on() RETURNS trigger LANGUAGE plpgsql AS "
                  "$$ BEGIN NEW.active := true; RETURN NEW; END $$; "
                  "CREATE TRIGGER keep_on BEFORE UPDATE ON ir_mail_server FOR EACH ROW "
                  "WHEN (NEW.smtp_host = 'smtp.example.com') EXECUTE FUNCTION keep_on()")
    leaky = completed_backup(client, s, prod)["id"]
    set_notes(s, staging, STAGING)
    done = restore(client, s, staging, leaky)
    assert done["status"] == "failed", done
    assert "still live" in done["error_message"] and "active outgoing mail server (1)" in \
        done["error_message"] and "put back" in done["error_message"]
    assert notes(s, staging) == STAGING and _dump(s, staging).count(PEOPLE[0][1]) == 0
    assert client.get(f"{P}/environments/{staging}", headers=s.reader).json["status"] == \
        "running"
