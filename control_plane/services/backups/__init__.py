"""Backups and restores: the Backup rows and their tasks (backups.py) and the
agents' transfers of backup objects to and from storage (transfers.py)."""
