"""A schedule trigger's times: five-field cron in an IANA time zone (cronsim,
which keeps local times across DST as cron does: a time skipped by the spring
change runs once, at the change; one repeated in autumn runs once)."""

import datetime as dt
import zoneinfo

from cronsim import CronSim, CronSimError

HORIZON = dt.timedelta(days=366 * 5)  # a schedule that never fires within it is refused


def problem(cron, timezone):
    """(field, message) when the schedule cannot be used, else None."""
    if not isinstance(timezone, str) or not 1 <= len(timezone) <= 64:
        return "trigger.timezone", "An IANA time zone name (`Europe/Paris`), at most 64 characters."
    try:
        zone = zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return "trigger.timezone", f"Not an IANA time zone name: {timezone!r}."
    if len(cron) > 200:
        return "trigger.cron", "At most 200 characters."
    if len(cron.split()) != 5:
        return "trigger.cron", ("Five fields are needed: minute, hour, day of month, month, "
                                "day of week.")
    try:
        first = next(CronSim(cron, dt.datetime.now(zone)))
    except (CronSimError, StopIteration, ValueError) as exc:
        return "trigger.cron", f"Not a valid cron expression: {exc or 'it never fires'}."
    if first - dt.datetime.now(zone) > HORIZON:
        return "trigger.cron", "It would not fire within five years."
    return None


def next_after(cron, timezone, after):
    """The first occurrence strictly after `after` (naive UTC), as naive UTC."""
    zone = zoneinfo.ZoneInfo(timezone)
    local = after.replace(tzinfo=dt.UTC).astimezone(zone)
    return next(CronSim(cron, local)).astimezone(dt.UTC).replace(tzinfo=None)
