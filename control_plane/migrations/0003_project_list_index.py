"""Projects list: an index that answers an organization's active projects in list
order (created_at, id), so a page reads its rows in order and stops at the limit
instead of sorting all of them, and the total counts from the index alone."""

COLUMNS = ('organization_id', 'deleted_at', 'created_at', 'id')


def up(migrator, db):
    migrator.migrate(migrator.add_index('project', COLUMNS, False))


def down(migrator, db):
    migrator.migrate(migrator.drop_index('project', 'project_' + '_'.join(COLUMNS)))
