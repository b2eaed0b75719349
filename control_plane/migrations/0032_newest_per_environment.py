"""An environment's newest backup and newest task of a kind, read from an index (the
console's overview asks it of every environment at once; the environment page
lists its tasks newest first)."""

INDEXES = (('backup', ('environment_id', 'created_at')),
           ('deployment', ('environment_id', 'created_at')))


def up(migrator, db):
    migrator.migrate(*(migrator.add_index(table, columns, False) for table, columns in INDEXES))


def down(migrator, db):
    migrator.migrate(*(migrator.drop_index(table, f"{table}_{'_'.join(columns)}")
                       for table, columns in INDEXES))
