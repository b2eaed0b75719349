"""What an environment's size is made of, taken with its disk use (agent.metrics.disk):

- the database's largest tables (with their indexes and TOAST, and the planner's row
  estimate), asked inside its PostgreSQL container;
- the files of the ERP database's filestore (`<data_dir>/filestore/<db>`);
- attachments whose file is missing (an `ir_attachment.store_fname` with no file: what
  a move or a partial restore leaves, odoo/odoo#200894), with a sample of their names;
- files no attachment names (orphans: what Odoo's garbage collection has not removed,
  or a restore that brought files without their rows).

The attachment check reads every stored attachment's name and looks for its file, so
it runs only when something changed since the last one: the filestore's directories
(the disk walk re-walked it) or `ir_attachment`'s rows (PostgreSQL's count of rows
inserted, updated and deleted). Otherwise the last figures stand."""

import logging
import os
import re

from agent.errors import AgentError
from agent.metrics import engine

log = logging.getLogger("berth.agent")

DB_NAME, DB_USER = "odoo", "odoo"  # as agent.deploy.environments configures every environment
TOP = 10
SAMPLE = 10
TABLES_SQL = (
    "SELECT c.relname, pg_total_relation_size(c.oid), c.reltuples::bigint FROM pg_class c"
    " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p', 'm')"
    f" AND n.nspname = 'public' ORDER BY 2 DESC, 1 LIMIT {TOP}")
CHANGES_SQL = ("SELECT coalesce((SELECT n_tup_ins + n_tup_upd + n_tup_del FROM"
               " pg_stat_user_tables WHERE relname = 'ir_attachment'), -1)")
NAMES_SQL = ("SELECT DISTINCT store_fname FROM ir_attachment WHERE store_fname IS NOT NULL"
             " AND store_fname <> '' ORDER BY 1")
STORED = re.compile(r"^[0-9a-f]{2}$")  # Odoo's layout: <sha1[:2]>/<sha1>


def psql(container_id, sql, timeout=120):
    """The query's rows in the ERP's database (fields split on |), or None when it
    could not run (said in the log)."""
    try:
        code, out = engine.exec_output(container_id, [
            "psql", "-U", DB_USER, "-d", DB_NAME, "-tAX", "-F", "|", "-c", sql], timeout)
    except AgentError as exc:
        log.info("psql in %s: %s", container_id[:12], exc)
        return None
    if code != 0:
        log.info("psql in %s exited %s", container_id[:12], code)
        return None
    return [line.split("|") for line in out.splitlines() if line]


def largest_tables(container_id):
    rows = psql(container_id, TABLES_SQL)
    if rows is None:
        return None
    try:
        return [{"name": r[0], "bytes": int(r[1]), "rows": max(-1, int(float(r[2])))}
                for r in rows]
    except (IndexError, ValueError):
        return None


def _stored(root, path):
    """Whether the file is in one of Odoo's <xx>/ directories right under the root."""
    folder = os.path.dirname(path)
    return os.path.dirname(folder) == root and bool(STORED.match(os.path.basename(folder)))


def _stored_files(filestore):
    """(files under the filestore, files in Odoo's <xx>/ directories); each a
    readdir, no stat of a file."""
    total = stored = 0
    pending = [filestore]
    while pending:
        path = pending.pop()
        try:
            entries = os.scandir(path)
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += 1
                        stored += _stored(filestore, entry.path)
                except OSError:
                    continue
    return total, stored


class Attachments:
    """The attachment check of one environment, done again only on a change."""

    def __init__(self):
        self.key, self.figures = None, {}

    def measure(self, container_id, filestore, walks):
        """{filestore_files, attachments_missing, files_orphaned, missing_sample}, or
        what was last taken when nothing changed (empty when never taken)."""
        changes = psql(container_id, CHANGES_SQL)
        key = (walks, changes and changes[0][0])
        if changes is None or key == self.key:
            return self.figures
        names = psql(container_id, NAMES_SQL, timeout=600)
        if names is None:  # no ir_attachment table yet (a database being made)
            return self.figures
        root = os.path.realpath(filestore)
        missing, present_stored = [], 0
        for (name, *_rest) in names:
            path = os.path.realpath(os.path.join(root, name))
            if not path.startswith(root + os.sep) or not os.path.isfile(path):
                missing.append(name)
            elif _stored(root, path):
                present_stored += 1
        total, stored = _stored_files(root)
        self.key = key
        self.figures = {"filestore_files": total, "attachments_missing": len(missing),
                        "files_orphaned": max(0, stored - present_stored),
                        "missing_sample": missing[:SAMPLE]}
        return self.figures
