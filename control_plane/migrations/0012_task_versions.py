"""A deployment's `version` counts deployments only (the spec: it "increments per
new deployment"). Backups, restores and exports took numbers from the same counter;
they now have none (NULL), and the column allows it. Deployments keep the numbers
they were shown, gaps included: users and `rollback_to_version` refer to them."""

NOT_DEPLOYMENTS = "('backup', 'restore', 'export')"


def up(migrator, db):
    migrator.migrate(migrator.drop_not_null('deployment', 'version'))
    db.execute_sql(f"UPDATE deployment SET version = NULL WHERE kind IN {NOT_DEPLOYMENTS}")


def down(migrator, db):
    # Numbers after each environment's highest, in the order the tasks were made.
    rows = db.execute_sql("SELECT id, environment_id FROM deployment WHERE version IS NULL "
                          "ORDER BY created_at, id").fetchall()
    for task_id, env_id in rows:
        top = db.execute_sql(f"SELECT MAX(version) FROM deployment "
                             f"WHERE environment_id = {db.param}", (env_id,)).fetchone()[0] or 0
        db.execute_sql(f"UPDATE deployment SET version = {db.param} WHERE id = {db.param}",
                       (top + 1, task_id))
    migrator.migrate(migrator.add_not_null('deployment', 'version'))
