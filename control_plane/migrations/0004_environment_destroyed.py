"""Destroyed environments get their own status: `destroyed` (before, `pending`
meant both "never deployed" and "destroyed"). A destroyed one is inactive, still
`pending`, and has the `destroyed` record of its destroy. The public API keeps
showing `pending` for it (states.PUBLIC_ENVIRONMENT_STATUS)."""

DESTROYED = ("status = 'pending' AND NOT is_active AND EXISTS (SELECT 1 FROM deployment "
             "WHERE deployment.environment_id = environment.id "
             "AND deployment.kind = 'destroy' AND deployment.status = 'destroyed')")


def up(migrator, db):
    db.execute_sql(f"UPDATE environment SET status = 'destroyed' WHERE {DESTROYED}")


def down(migrator, db):
    db.execute_sql("UPDATE environment SET status = 'pending' WHERE status = 'destroyed'")
