"""`odoo neutralize -d DB` (Odoo 16+): the installed modules' data/neutralize.sql."""

import logging
import sys

import psycopg2

from odoo_stand_in.config import checked_settings, fail, parse_args, start_logging
from odoo_stand_in.database import Database, create_tables

# The installed modules' data/neutralize.sql (base, mail, payment, delivery) as Odoo 17
# ships them, for the tables the stand-in models: the autovacuum is found by its
# external id, as Odoo finds it.
NEUTRALIZE_SQL = """UPDATE ir_cron SET active = false WHERE id NOT IN (SELECT res_id
    FROM ir_model_data WHERE model = 'ir.cron' AND name = 'autovacuum_job');
UPDATE ir_mail_server SET active = false;
INSERT INTO ir_mail_server (name, smtp_host, smtp_port, smtp_encryption, active)
    VALUES ('neutralization - disable emails', 'invalid', 1025, 'none', true);
UPDATE fetchmail_server SET active = false;
UPDATE payment_provider SET state = 'disabled' WHERE state NOT IN ('test', 'disabled');
UPDATE delivery_carrier SET prod_environment = false;
INSERT INTO ir_config_parameter (key, value) VALUES ('database.is_neutralized', true)
    ON CONFLICT (key) DO UPDATE SET value = true;
"""


def neutralize(argv, env_defaults):
    """`odoo neutralize -d DB`: Odoo's options plus --stdout; the database must exist."""
    start_logging(sys.stdout)
    nlog = logging.getLogger("odoo.modules.neutralize")
    args, unknown = parse_args(argv)
    to_stdout = "--stdout" in unknown
    unknown = [a for a in unknown if a != "--stdout"]
    if unknown:
        fail(f"unrecognized arguments: {' '.join(unknown)}")
    if not args.db_name:
        fail("neutralize needs a database: -d DB")
    s = checked_settings(args, env_defaults)
    if to_stdout:
        print("BEGIN;\n" + NEUTRALIZE_SQL + "COMMIT;")
        return 0
    try:
        conn = Database(s).open()
    except psycopg2.Error as exc:
        nlog.error("The database %s is not neutralized: %s", s["db_name"], str(exc).strip())
        return 1
    try:
        with conn, conn.cursor() as cr:
            nlog.info("Starting %s database neutralization", s["db_name"])
            create_tables(cr)
            cr.execute(NEUTRALIZE_SQL)
    except psycopg2.Error as exc:
        nlog.error("The database %s is not neutralized: %s", s["db_name"], str(exc).strip())
        return 1
    finally:
        conn.close()
    nlog.info("Neutralization finished")
    return 0
