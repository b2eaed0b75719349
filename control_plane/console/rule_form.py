"""Automation rules as a form: the trigger and the action picked by type, the
environments by name, and the form read back into the rule the public API's POST
takes (only the fields of the types chosen). Rules said in words for the list,
and a schedule's next runs in the rule's time zone."""

import datetime as dt
import zoneinfo

from control_plane.infra import clock
from control_plane.services.automation import schedules

TRIGGER_FIELDS = {"git_push": ("branch",), "schedule": ("cron", "timezone"),
                  "event": ("event", "environment_id")}
ACTION_FIELDS = {"deploy": ("environment_id",), "backup": ("environment_id",),
                 "copy_database": ("source_environment_id", "environment_id", "fresh",
                               "allow_production", "neutralize_profile", "anonymize"),
                 "preview": ("source_environment_id", "ttl_hours", "max_environments",
                             "neutralize_profile", "anonymize"),
                 "test": ("source_environment_id", "keep_hours", "remove_on_success",
                          "neutralize_profile", "anonymize")}
FLAGS = ("fresh", "allow_production", "anonymize", "remove_on_success")
NUMBERS = ("ttl_hours", "max_environments", "keep_hours")
NEXT_RUNS = 5


def rule_from(form):
    """{name, enabled, trigger, action} from the form's fields."""
    trigger_type, action_type = form.get("trigger.type", ""), form.get("action.type", "")
    trigger = {"type": trigger_type, **_given(form, "trigger", TRIGGER_FIELDS.get(trigger_type, ()))}
    action = {"type": action_type, **_given(form, "action", ACTION_FIELDS.get(action_type, ()))}
    return {"name": form.get("name", "").strip(), "enabled": bool(form.get("enabled")),
            "trigger": trigger, "action": action}


def _given(form, part, names):
    out = {}
    for name in names:
        raw = form.get(f"{part}.{name}", "").strip()
        if name in FLAGS:
            if part == "action" and name == "anonymize" and not raw:
                continue  # the target's copy policy decides
            out[name] = raw == "1"
        elif raw == "":
            continue  # the rule's default
        elif name in NUMBERS:
            out[name] = int(raw) if raw.isdigit() else raw  # the rule says what is wrong
        else:
            out[name] = raw
    return out


def values(rule):
    """A stored rule as the form's field values."""
    out = {"name": rule.name, "enabled": "1" if rule.enabled else ""}
    for part in ("trigger", "action"):
        for key, value in (getattr(rule, part) or {}).items():
            out[f"{part}.{key}"] = ("1" if value else "") if isinstance(value, bool) \
                else ("" if value is None else str(value))
    return out


def said(rule, names):
    """(when, does) in words; `names`: {environment id: name}."""
    t, a = rule.trigger, rule.action
    env = lambda key, part=a: names.get(part.get(key), "an environment")  # noqa: E731
    when = {"git_push": lambda: f"a push to {t.get('branch')}",
            "schedule": lambda: f"{t.get('cron')} ({t.get('timezone') or 'UTC'})",
            "event": lambda: f"{t.get('event')} of {env('environment_id', t)}"}.get(
        t.get("type"), lambda: t.get("type", "—"))()
    does = {"deploy": lambda: f"deploy {env('environment_id')}",
            "backup": lambda: f"back up {env('environment_id')}",
            "copy_database": lambda: f"copy {env('source_environment_id')}'s database into "
                                     f"{env('environment_id')}",
            "preview": lambda: "an environment per pushed branch"
                               + (f", from {env('source_environment_id')}'s data"
                                  if a.get("source_environment_id") else ""),
            "test": lambda: "build each push: the changed modules' tests"
                            + (f", on {env('source_environment_id')}'s data"
                               if a.get("source_environment_id") else ", on an empty database")}.get(
        a.get("type"), lambda: a.get("type", "—"))()
    return when, does


def next_runs(cron, timezone, count=NEXT_RUNS):
    """The next `count` times in the rule's own zone, or (None, the problem)."""
    timezone = timezone or "UTC"
    problem = schedules.problem(cron or "", timezone)
    if problem is not None:
        return None, problem[1]
    zone, at, out = zoneinfo.ZoneInfo(timezone), clock.now(), []
    for _ in range(count):
        at = schedules.next_after(cron, timezone, at)
        out.append(at.replace(tzinfo=dt.UTC).astimezone(zone))
    return out, None
