"""Backups and restores: the backup, restore and export tasks and their rows
(tasks.py), starting them on every surface (backups.py), Odoo's zip format both
ways (odoo.py), the backup policy and scheduled backups (policy.py), retention
(retention.py), the agents' transfers of objects to and from storage
(transfers.py, through stores.py), restored copies neutralised (neutralize.py)
and restore drills (drills.py)."""
