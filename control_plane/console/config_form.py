"""The configuration form: an environment's variables, ERP options and PostgreSQL
settings as fields (each known option with its kind, limits and unit, from the rules
the API checks: services/environment_settings/config_rules.py), and the form read
back into the change the operations API's PATCH takes, holding only what changed."""

from control_plane.services.environment_settings import config_rules as rules

NEW_ROWS = 3  # blank rows for new variables
UNITS = {"limit_memory_soft": "bytes", "limit_memory_hard": "bytes",
         "limit_time_cpu": "seconds", "limit_time_real": "seconds",
         "limit_time_real_cron": "seconds (-1: no limit)", "limit_request": "requests",
         "statement_timeout": "milliseconds (0: none)",
         "idle_in_transaction_session_timeout": "milliseconds (0: none)",
         "lock_timeout": "milliseconds (0: none)",
         "log_min_duration_statement": "milliseconds (-1: off)",
         "server_wide_modules": "module names, comma-separated"}
SECTIONS = (("erp_options", "ERP options", rules.ERP_OPTIONS),
            ("postgres_settings", "PostgreSQL settings", rules.POSTGRES_SETTINGS))


def fields(config):
    """[(section, title, [field])]: each allowed key with its current value as text."""
    out = []
    for section, title, table in SECTIONS:
        rows = []
        for key, check in sorted(table.items()):
            schema = dict(getattr(check, "schema", {}))
            value = config[section].get(key)
            rows.append({"key": key, "name": f"{section}.{key}", "schema": schema,
                         "unit": UNITS.get(key, ""), "value": _text(value)})
        out.append((section, title, rows))
    return out


def _text(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(value)
    return str(value)


def changes(form, config):
    """{section: {name: value or None}} of what the form changes (None removes)."""
    out = {"variables": _variables(form, config)}
    for section, _, table in SECTIONS:
        for key, check in table.items():
            name = f"{section}.{key}"
            if name not in form:
                continue
            typed = form.get(name, "").strip()
            if typed == _text(config[section].get(key)):
                continue
            kind = getattr(check, "schema", {}).get("type")
            out.setdefault(section, {})[key] = None if typed == "" else _value(kind, typed)
    return {k: v for k, v in out.items() if v}


def _value(kind, typed):
    """A typed value for the rule to check (what it cannot read stays text, which the
    rule refuses with its own words)."""
    try:
        if kind == "integer":
            return int(typed)
        if kind == "number":
            return float(typed)
    except ValueError:
        return typed
    if kind == "boolean":
        return {"true": True, "false": False}.get(typed, typed)
    if kind == "array":
        return [m.strip() for m in typed.replace(" ", ",").split(",") if m.strip()]
    return typed


def _variables(form, config):
    found = {}
    current = {v["name"]: v for v in config["variables"]}
    for name, was in current.items():
        if form.get(f"var.{name}.remove"):
            found[name] = None
            continue
        value = form.get(f"var.{name}.value")
        secret = bool(form.get(f"var.{name}.secret"))
        if value is None:
            continue
        if was["secret"] and value == "" and secret:
            continue  # a secret left blank keeps its value
        if not was["secret"] and value == was["value"] and not secret:
            continue
        found[name] = {"value": value, "secret": secret}
    for i in range(NEW_ROWS):
        name = form.get(f"new.{i}.name", "").strip()
        if name:
            found[name] = {"value": form.get(f"new.{i}.value", ""),
                           "secret": bool(form.get(f"new.{i}.secret"))}
    return found
