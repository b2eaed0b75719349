"""A neutralised copy that checks itself, and optionally anonymised.

`odoo neutralize` (neutralize.py) runs what the installed modules ship; nothing
says it reached everything. After it, the agent clears what its profile clears
and then reads the copy back: anything still live fails the copy (the restore
fails and the environment is put back as it was, never served).

Profiles:
- `standard`: clears known credential parameters of Odoo's integrations and
  gives the copy a `database.secret` of its own (tokens signed by production do
  not work on it); checks that no outgoing mail server is active but the
  neutralisation's dummy (host `invalid`), no scheduled action but the
  autovacuum, no payment provider or carrier in live mode, no known credential
  parameter set, and `database.is_neutralized` true.
- `strict`: also turns incoming mail servers off, empties every column named like
  a credential in the integration tables (mail servers, payment providers,
  carriers, companies, IAP accounts, OAuth providers, users but their password),
  removes parameters named like a credential and users' API keys; and checks
  each of those.

Anonymisation (irreversible) rewrites personal data: partners' names, e-mails,
phones and addresses, the logins and passwords of users other than base's own
(the administrator, the system users), message subjects, bodies and senders,
queued mails, tracked values and bank account numbers. Tables or columns a
database lacks are skipped. What ran is returned, table by table."""

import re

from agent.backups.databases import psql
from agent.errors import AgentError
from protocol.errors import AgentErrorCode

PROFILES = ("standard", "strict")
AUTOVACUUM = ("id NOT IN (SELECT res_id FROM ir_model_data WHERE model = 'ir.cron'"
              " AND module = 'base' AND name = 'autovacuum_job')")
# Parameters of Odoo's own integrations that hold a credential.
KNOWN_CREDENTIALS = ("google_gmail_client_secret", "microsoft_outlook_client_secret",
                     "google_calendar_client_secret", "google_drive_client_secret",
                     "microsoft_calendar_client_secret", "mail.sfu_server_key",
                     "mail.google_translate_api_key", "web_unsplash.access_key",
                     "recaptcha_private_key", "cf.turnstile_secret", "ocn.uuid",
                     "odoo_ocn.project_id", "base_geolocalize.google_map_api_key")
CREDENTIAL_NAME = "(secret|passw|_pass$|token|api_?key|access_key|private_key|client_key)"
NOT_CREDENTIALS = ("auth_signup.reset_password", "database.secret")  # a setting; rotated
CREDENTIAL_TABLES = ("ir_mail_server", "fetchmail_server", "payment_provider",
                     "delivery_carrier", "res_company", "iap_account", "auth_oauth_provider",
                     "res_users")
KEPT_COLUMNS = {("res_users", "password")}  # a login; anonymisation clears others'
BASE_USERS = "id NOT IN (SELECT res_id FROM ir_model_data WHERE model = 'res.users'" \
             " AND module = 'base')"
_NAME, _EMAIL = "'Partner ' || id", "'partner-' || id || '@example.invalid'"
ANONYMIZE = {  # table: (which rows, {column: new value})
    "res_partner": ("true", {
        "name": _NAME, "display_name": _NAME, "complete_name": _NAME,
        "commercial_company_name": "NULL", "email": _EMAIL, "email_normalized": _EMAIL,
        **dict.fromkeys(("phone", "mobile", "phone_sanitized", "street", "street2", "zip",
                         "city", "vat", "website", "comment", "function", "ref",
                         "company_registry"), "NULL")}),
    "res_users": (BASE_USERS, {"login": "'user-' || id", "password": "NULL",
                               "signature": "NULL"}),
    "mail_message": ("true", dict.fromkeys(("subject", "body", "email_from", "reply_to",
                                            "record_name", "preview"), "NULL")),
    "mail_mail": ("true", dict.fromkeys(("body_html", "email_to", "email_cc",
                                         "references"), "NULL")),
    "mail_tracking_value": ("true", dict.fromkeys(("old_value_char", "new_value_char",
                                                   "old_value_text", "new_value_text"),
                                                  "NULL")),
    "res_partner_bank": ("true", {"acc_number": "'ANON-' || id",
                                  "sanitized_acc_number": "'ANON' || id",
                                  "acc_holder_name": "NULL"}),
}
TEXT = ("character varying", "text")


class UnsafeCopy(AgentError):
    code = AgentErrorCode.RESTORE_FAILED


class _Copy:
    """The copy's database and what it has of the tables above."""

    def __init__(self, api, db, database):
        self.api, self.db, self.database = api, db, database
        tables = sorted({"ir_config_parameter", "ir_mail_server", "ir_cron", "ir_model_data",
                         "fetchmail_server", "payment_provider", "delivery_carrier",
                         "res_users_apikeys", *CREDENTIAL_TABLES, *ANONYMIZE})
        names = ", ".join(f"'{t}'" for t in tables)
        rows = self.sql(f"SELECT table_name, column_name, is_nullable, data_type FROM "
                        f"information_schema.columns WHERE table_schema = 'public' AND "
                        f"table_name IN ({names})")
        self.columns = {}
        for line in rows.splitlines():
            table, column, nullable, kind = line.split("|")
            self.columns.setdefault(table, {})[column] = (nullable == "YES", kind)

    def sql(self, *statements):
        return psql(self.api, self.db, *statements, database=self.database)

    def has(self, table, *columns):
        return table in self.columns and all(c in self.columns[table] for c in columns)

    def counted(self, steps):
        """{what: number} of [(what, SQL)]: each a count, or a data change's rows."""
        if not steps:
            return {}
        numbers = [int(n) for n in self.sql(*(sql for _, sql in steps)).split()]
        return dict(zip((what for what, _ in steps), numbers, strict=True))

    def credential_columns(self, table):
        return [c for c, (_, kind) in sorted(self.columns.get(table, {}).items())
                if kind in TEXT and (table, c) not in KEPT_COLUMNS
                and re.search(CREDENTIAL_NAME, c)]

    def empty(self, table, column):
        nullable, _ = self.columns[table][column]
        return "NULL" if nullable else "''"


def _changed(table, assignments, where="true"):
    return (f"WITH changed AS (UPDATE {table} SET {assignments} WHERE {where} RETURNING 1) "
            "SELECT count(*) FROM changed")


def _deleted(table, where="true"):
    return (f"WITH gone AS (DELETE FROM {table} WHERE {where} RETURNING 1) "
            "SELECT count(*) FROM gone")


def _parameters(strict):
    known = ", ".join(f"'{k}'" for k in KNOWN_CREDENTIALS)
    where = f"key IN ({known})"
    if strict:
        kept = ", ".join(f"'{k}'" for k in NOT_CREDENTIALS)
        where = f"({where} OR key ~* '{CREDENTIAL_NAME}') AND key NOT IN ({kept})"
    return where


def _clearing(copy, strict):
    """[(what, SQL returning how many rows it changed)] of the profile."""
    steps = []
    if copy.has("ir_config_parameter", "key", "value"):
        steps.append(("credential parameters", _deleted("ir_config_parameter",
                                                        _parameters(strict))))
        steps.append(("database.secret rotated", _changed(
            "ir_config_parameter", "value = gen_random_uuid()::text",
            "key = 'database.secret'")))
    if not strict:
        return steps
    if copy.has("fetchmail_server", "active"):
        steps.append(("incoming mail servers off", _changed(
            "fetchmail_server", "active = false", "active")))
    for table in CREDENTIAL_TABLES:
        if columns := copy.credential_columns(table):
            set_ = ", ".join(f'"{c}" = {copy.empty(table, c)}' for c in columns)
            steps.append((f"{table} credentials", _changed(
                table, set_, " OR ".join(f"coalesce(\"{c}\", '') <> ''" for c in columns))))
    if copy.has("res_users_apikeys"):
        steps.append(("user API keys", _deleted("res_users_apikeys")))
    return steps


def _checks(copy, strict):
    """[(what is still live, SQL counting it)] of the profile."""
    checks = []
    if copy.has("ir_mail_server", "active", "smtp_host"):
        checks.append(("active outgoing mail server", "SELECT count(*) FROM ir_mail_server "
                       "WHERE active AND smtp_host IS DISTINCT FROM 'invalid'"))
    if copy.has("ir_cron", "active") and copy.has("ir_model_data", "res_id"):
        checks.append(("active scheduled action other than the autovacuum",
                       f"SELECT count(*) FROM ir_cron WHERE active AND {AUTOVACUUM}"))
    if copy.has("payment_provider", "is_live"):
        checks.append(("payment provider in live mode",
                       "SELECT count(*) FROM payment_provider WHERE is_live"))
    elif copy.has("payment_provider", "state"):
        checks.append(("payment provider in live mode",
                       "SELECT count(*) FROM payment_provider WHERE state = 'enabled'"))
    if copy.has("delivery_carrier", "prod_environment"):
        checks.append(("carrier in production mode",
                       "SELECT count(*) FROM delivery_carrier WHERE prod_environment"))
    if copy.has("ir_config_parameter", "key", "value"):
        checks.append(("credential parameter still set", "SELECT count(*) FROM "
                       f"ir_config_parameter WHERE {_parameters(strict)} AND value <> ''"))
        checks.append(("database.is_neutralized not set", "SELECT count(*) FROM (SELECT 1) "
                       "one WHERE NOT EXISTS (SELECT 1 FROM ir_config_parameter WHERE key = "
                       "'database.is_neutralized' AND lower(value) IN ('true', 't', '1'))"))
    if not strict:
        return checks
    if copy.has("fetchmail_server", "active"):
        checks.append(("active incoming mail server",
                       "SELECT count(*) FROM fetchmail_server WHERE active"))
    for table in CREDENTIAL_TABLES:
        if columns := copy.credential_columns(table):
            filled = " OR ".join(f"coalesce(\"{c}\", '') <> ''" for c in columns)
            checks.append((f"{table} credential still set",
                           f"SELECT count(*) FROM {table} WHERE {filled}"))
    if copy.has("res_users_apikeys"):
        checks.append(("user API key", "SELECT count(*) FROM res_users_apikeys"))
    return checks


def _anonymizing(copy):
    steps = []
    for table, (where, values) in ANONYMIZE.items():
        present = {c: v for c, v in values.items() if copy.has(table, c)}
        if not present:
            continue
        if table == "res_users" and not copy.has("ir_model_data", "res_id"):
            where = "login <> 'admin'"
        set_ = ", ".join(f'"{c}" = {copy.empty(table, c) if v == "NULL" else v}'
                         for c, v in present.items())
        steps.append((table, _changed(table, set_, where)))
    return steps


def make_safe(api, db, database, *, profile="standard", anonymize=False, log):
    """After `odoo neutralize` on `database`: the profile's clearing, its checks (any
    finding raises UnsafeCopy naming it), then anonymisation when asked. Returns
    what ran: {"profile", "cleared": {what: rows}, "checked": [what],
    "anonymized": {table: rows} or None}."""
    if profile not in PROFILES:
        raise UnsafeCopy(f"unknown neutralisation profile {profile!r}")
    strict = profile == "strict"
    copy = _Copy(api, db, database)
    cleared = copy.counted(_clearing(copy, strict))
    log("info", f"neutralisation profile {profile}: cleared "
                + (", ".join(f"{w} ({n})" for w, n in cleared.items()) or "nothing more"))
    checks = _checks(copy, strict)
    found = {w: n for w, n in copy.counted(checks).items() if n}
    if found:
        raise UnsafeCopy("the copy is still live after neutralisation (profile "
                         f"{profile}): " + ", ".join(f"{w} ({n})" for w, n in found.items()))
    log("info", f"checked the copy: nothing live ({', '.join(w for w, _ in checks)})")
    anonymized = None
    if anonymize:
        anonymized = copy.counted(_anonymizing(copy))
        log("info", "anonymised the copy (irreversible): "
                    + ", ".join(f"{t} ({n} rows)" for t, n in anonymized.items()))
    return {"profile": profile, "cleared": cleared, "checked": [w for w, _ in checks],
            "anonymized": anonymized}
