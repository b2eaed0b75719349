"""Backups and restores of an environment, and Odoo's own backup zip:

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
streams. These modules are imported when a backup, restore or export command
first runs (and at start, when a restore cut short is rolled back); they work
on the environments of `agent.deploy`."""
