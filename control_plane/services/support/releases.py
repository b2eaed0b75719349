"""Release notes of the platform (the changelog)."""

import datetime as dt
import re

from control_plane.infra.db import database
from control_plane.models import Release
from control_plane.vocabulary.errors import ApiError, Conflict

VERSION_RE = re.compile(r"^(0|[1-9]\d{0,5})\.(0|[1-9]\d{0,5})\.(0|[1-9]\d{0,5})$")
CATEGORIES = ("added", "changed", "improved", "fixed")


def parse_version(text):
    """'1.10.2' -> (1, 10, 2), compared as numbers, not strings."""
    match = VERSION_RE.match(text or "")
    if not match:
        raise ValueError(f"{text!r} is not a <major>.<minor>.<patch> version")
    return tuple(int(part) for part in match.groups())


def releases(since_version=None, since_date=None):
    query = Release.select()
    if since_version is not None:
        major, minor, patch = since_version
        query = query.where(
            (Release.major > major)
            | ((Release.major == major) & (Release.minor > minor))
            | ((Release.major == major) & (Release.minor == minor) & (Release.patch > patch)))
    if since_date is not None:
        query = query.where(Release.date >= since_date)
    return query.order_by(Release.major.desc(), Release.minor.desc(), Release.patch.desc())


def add_release(*, version, date, title, highlights=(), categories=None):
    try:
        major, minor, patch = parse_version(version)
    except ValueError as exc:
        raise ApiError(str(exc)) from None
    if not isinstance(date, dt.date):
        try:
            date = dt.date.fromisoformat(date)
        except ValueError:
            raise ApiError(f"{date!r} is not a YYYY-MM-DD date") from None
    cats = {k: list(v) for k, v in (categories or {}).items() if v}
    with database.atomic():
        if Release.select().where(Release.version == version).exists():
            raise Conflict(f"release {version} already exists")
        return Release.create(version=version, major=major, minor=minor, patch=patch, date=date,
                              title=title, highlights=list(highlights), categories=cats)
