"""What an `export` task (lifecycle.KINDS, services/backups/odoo.py) does when
it starts and ends: nothing of its own. Its object, `odoo-export.zip`, is
recorded with the backup's others when its upload completes (transfers.py);
no Backup row follows it and no `deploy.*` event is recorded for it."""

EXPORT_OBJECT = "odoo-export.zip"


def started(d, org_id, now):
    pass


def refused(d, result):
    if result.get("object") != EXPORT_OBJECT:
        return "the export's zip was not uploaded"
    return None


def settled(d, outcome, org_id, now):
    pass
