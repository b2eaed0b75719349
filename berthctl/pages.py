"""The cursor lists of the APIs (`{data, pagination}`), read to their end."""

PAGE = 100  # the APIs' largest cursor page


def all_pages(client, path, limit=None, **params):
    """Follow a cursor list (`{data, pagination}`) until its end or `limit` rows."""
    rows, cursor = [], None
    while True:
        size = PAGE if limit is None else max(1, min(PAGE, limit - len(rows)))
        page = client.get(path, limit=size, cursor=cursor, **params)
        rows.extend(page["data"])
        cursor = page["pagination"].get("next_cursor")
        if not cursor or not page["pagination"].get("has_more", True) \
                or (limit is not None and len(rows) >= limit):
            return rows[:limit] if limit is not None else rows
