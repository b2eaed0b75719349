"""The spec's three pagination styles, bounded in SQL (keyset for cursors,
LIMIT/OFFSET otherwise), never by slicing a loaded table."""

import datetime
import hashlib
import uuid

from itsdangerous import BadSignature
from peewee import fn

from control_plane.infra import security
from control_plane.infra.compiled import Compiled, Rendered
from control_plane.vocabulary.errors import InvalidCursor

_TOTAL = "_berth_total"  # the page statement's column for the list's total
_ALSO = "_berth_also"  # and for a caller's scalar (`page(also=...)`)


class CursorList:
    """A cursor-paginated list ordered by (created_at, id).

    `build(*params, shape=...)` returns the list's filtered query; `shape` names
    its variant (e.g. project-scoped or not) and `params` are the filter values in
    database form. The COUNT and page statements are compiled once per shape.
    Cursors are signed for this list and its filter values (organization,
    project, status…), so a cursor made by another list, for other filters or
    by hand is refused (400 invalid_cursor).

    The total rides on the page's statement as an uncorrelated subquery (run
    once per statement): one round trip per page, which on PostgreSQL costs
    more than the rest of a list request. Only an empty page after a cursor
    needs the separate COUNT."""

    def __init__(self, name, model, build, *, newest_first):
        self.name, self.model, self.build = name, model, build
        self.newest_first = newest_first
        self._count = Compiled(self._count_query)
        self._page = Compiled(self._page_query)

    def _count_query(self, *params, shape):
        return self.build(*params, shape=shape).select(fn.COUNT(self.model.id)).order_by()

    def _page_query(self, *params, shape):
        base_shape, has_cursor, also = shape
        *params, limit = params
        if also is not None:
            *params, also_param = params
        n = len(params) - (2 if has_cursor else 0)
        query, m = self.build(*params[:n], shape=base_shape), self.model
        if has_cursor:
            created, last = params[n], params[n + 1]
            if self.newest_first:
                query = query.where((m.created_at < created)
                                    | ((m.created_at == created) & (m.id < last)))
            else:
                query = query.where((m.created_at > created)
                                    | ((m.created_at == created) & (m.id > last)))
        order = (m.created_at.desc(), m.id.desc()) if self.newest_first else (m.created_at, m.id)
        total = self._count_query(*params[:n], shape=base_shape)
        query = query.select_extend(total.alias(_TOTAL))
        if also is not None:
            query = query.select_extend(also(also_param).alias(_ALSO))
        return query.order_by(*order).limit(limit)

    def page(self, *params, shape=(), limit, cursor, also=None, shown=None):
        """Returns (rows, {"has_more", "next_cursor", "total"}): the rows as dicts,
        ids as text, or with `shown` (a compiled.Shown) in their JSON form
        (compiled.Rendered).

        `also`: (build, param, receive), a scalar query `build(param)` read as a
        column of the page's own statement (no round trip of its own); `receive`
        gets its value, unless the page is empty."""
        after = self._decode(cursor, self._fingerprint(shape, params)) if cursor else ()
        build, param, receive = also if also is not None else (None, None, None)
        rows, scalars = self._page.listed(
            self.model, *params, *after, *((param,) if build else ()), limit + 1,
            shape=(shape, bool(after), build), scalars=2 if build else 1, shown=shown)
        if scalars is not None:
            total = scalars[0]
            if build is not None:
                receive(scalars[1])
        else:  # nothing matches at all, or nothing after the cursor
            total = self._count.scalar(*params, shape=shape) if after else 0
        has_more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = None
        if has_more:
            last = rows[-1] if shown is None else rows[-1][1]
            next_cursor = security.signer(f"cursor:{self.name}").dumps(
                [last["created_at"].isoformat(), last["id"].replace("-", ""),
                 self._fingerprint(shape, params)])
        if shown is not None:
            rows = Rendered(json for json, _ in rows)
        return rows, {"has_more": has_more, "next_cursor": next_cursor, "total": total}

    @staticmethod
    def _fingerprint(shape, params):
        """What a cursor is signed for besides its list: the filter values."""
        return hashlib.sha256(repr((shape, params)).encode()).hexdigest()[:16]

    def _decode(self, cursor, fingerprint):
        try:
            created_iso, last_id, fp = security.signer(f"cursor:{self.name}").loads(cursor)
            if fp != fingerprint:
                raise BadSignature("filters changed")
            return datetime.datetime.fromisoformat(created_iso), uuid.UUID(last_id).hex
        except (BadSignature, ValueError, TypeError):
            raise InvalidCursor("The cursor was not produced by this list.") from None


def page_page(query, *, page, page_size):
    total = query.count()
    items = list(query.paginate(page, page_size))
    return {"items": items, "total": total, "page": page, "page_size": page_size,
            "total_pages": -(-total // page_size)}


def offset_page(query, *, limit, offset):
    total = query.count()
    return list(query.limit(limit).offset(offset)), total
