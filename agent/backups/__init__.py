"""Backups and restores of an environment, and Odoo's own backup zip:

- `commands`: the backup, restore and export commands (registered in
  `agent.commands`);
- `backups`: `Backups`, Berth's backup (database dump, filestore archive,
  manifest, each verified in storage) and restore (a safety backup first, rolled
  back on any failure, and after an agent stop);
- `exec_stream`: pg_dump, pg_restore and psql inside the environment's
  PostgreSQL container, their standard streams carried a chunk at a time;
- `archive`: the filestore as one compressed tar stream, both ways;
- `transfer`: the control plane's transfer API (parts up, objects down);
- `odoo_transfer`, `odoo_zip`, `safe_zip`, `range_file`: the `export` command
  and imports of a `restore`, in Odoo's zip (or a bare dump), read safely from
  storage through HTTP range requests.

Nothing is staged on the server's disk and memory stays bounded: every object
streams. `commands` loads with the other command handlers; the rest when a
backup, restore or export first runs (and at start, when a restore cut short is
rolled back). They work on the environments of `agent.deploy`."""
