"""An environment's configuration: variables (given to the ERP container's
environment), ERP options (written into its configuration file) and PostgreSQL
settings (given to the database server), from the allow-lists in
`config_rules`: validated, stored, recorded by each deployment and rendered
into the agent's command.

Values of secret variables are sealed (`secretbox`) wherever they are stored:
on the environment, in each deployment's configuration snapshot and in the
agent's queued command. They are unsealed only as the command leaves for the
agent (`for_agent`), and they are never returned (shown as null), logged or
put in events."""

from control_plane.infra import clock, secretbox
from control_plane.models import Environment
from control_plane.services.environment_settings import config_rules as rules
from control_plane.vocabulary.errors import InvalidConfiguration

SEAL_PURPOSE = "environment-variable"
SECTIONS = ("variables", "erp_options", "postgres_settings")


# --- reading ----------------------------------------------------------------------

def stored(env):
    """The environment's configuration as stored (secret values sealed)."""
    return {name: dict(getattr(env, name) or {}) for name in SECTIONS}


def describe(env):
    """The configuration a reader sees: secret values null."""
    variables = env.variables or {}
    return {"environment_id": env.id,
            "variables": [{"name": name, "secret": v["secret"],
                           "value": None if v["secret"] else v["value"]}
                          for name, v in sorted(variables.items())],
            "erp_options": dict(env.erp_options or {}),
            "postgres_settings": dict(env.postgres_settings or {}),
            "updated_at": env.config_updated_at}


# --- changing ---------------------------------------------------------------------

def merged(env, changes):
    """The configuration after `changes` ({section: {name: value or None}}; None
    removes), validated; InvalidConfiguration with every problem in `details`."""
    out, problems = stored(env), {}
    for name, value in (changes.get("variables") or {}).items():
        where = f"variables.{name}"
        try:
            rules.variable_name(name)
            if value is None:
                out["variables"].pop(name, None)
                continue
            plain = rules.variable_value(value.get("value"))
        except ValueError as exc:
            problems[where] = [str(exc)]
            continue
        secret = bool(value.get("secret", False))
        out["variables"][name] = {"value": secretbox.seal(plain, SEAL_PURPOSE) if secret
                                  else plain, "secret": secret}
    if len(out["variables"]) > rules.MAX_VARIABLES:
        problems["variables"] = [f"At most {rules.MAX_VARIABLES} variables."]
    for section, table in (("erp_options", rules.ERP_OPTIONS),
                           ("postgres_settings", rules.POSTGRES_SETTINGS)):
        for key, value in (changes.get(section) or {}).items():
            if key not in table:
                problems[f"{section}.{key}"] = [f"Not an allowed key; allowed: "
                                                f"{', '.join(sorted(table))}."]
            elif value is None:
                out[section].pop(key, None)
            else:
                try:
                    table[key](value)
                    out[section][key] = value
                except ValueError as exc:
                    problems[f"{section}.{key}"] = [str(exc)]
    if not problems:
        problems = {f"erp_options.{k}": why for k, why in
                    rules.consistent_erp_options(_render(out["erp_options"],
                                                         rules.ERP_OPTIONS)).items()}
    if problems:
        said = "; ".join(f"{where}: {why[0]}" for where, why in sorted(problems.items())[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise InvalidConfiguration(f"The configuration was not changed: {said}{more}",
                                   details=problems)
    return out


def adopt(env, config):
    """A rollback: the environment's configuration becomes its target's."""
    store(env, {name: dict((config or {}).get(name) or {}) for name in SECTIONS})


def store(env, config):
    now = clock.now()
    Environment.update(config_updated_at=now, **config).where(Environment.id == env.id).execute()
    for name, value in config.items():
        setattr(env, name, value)
    env.config_updated_at = now


def same(a, b):
    """Secret values are sealed afresh on each change: compared unsealed."""
    def plain(config):
        return {**config, "variables": {
            n: (secretbox.unseal(v["value"], SEAL_PURPOSE) if v["secret"] else v["value"],
                v["secret"]) for n, v in config["variables"].items()}}
    return plain(a) == plain(b)


# --- the deployment and its command -------------------------------------------------

def snapshot(env):
    """What a deployment records of the configuration (secret values sealed)."""
    return stored(env)


def agent_fields(config):
    """The command's configuration fields, from a deployment's snapshot: options
    and settings as the agent writes them, secret values still sealed."""
    config = config or {}
    variables = {name: {"sealed": v["value"]} if v["secret"] else v["value"]
                 for name, v in (config.get("variables") or {}).items()}
    return {"variables": variables,
            "erp_options": _render(config.get("erp_options"), rules.ERP_OPTIONS),
            "postgres_settings": _render(config.get("postgres_settings"),
                                         rules.POSTGRES_SETTINGS)}


def for_agent(payload):
    """The payload as it leaves for the agent: secret values unsealed. One that
    cannot be (the control plane's secret key changed) is named in
    `unreadable_variables`, and the agent fails the deployment saying so."""
    variables = payload.get("variables")
    if not variables:
        return payload
    plain, unreadable = {}, []
    for name, value in variables.items():
        if isinstance(value, dict):
            value = secretbox.unseal(value.get("sealed") or "", SEAL_PURPOSE)
            if value is None:
                unreadable.append(name)
                continue
        plain[name] = value
    out = {**payload, "variables": plain}
    if unreadable:
        out["unreadable_variables"] = unreadable
    return out


def _render(values, table):
    """Values stored earlier were valid then; one a later rule refuses is left out."""
    out = {}
    for key, value in sorted((values or {}).items()):
        if key in table:
            try:
                out[key] = table[key](value)
            except ValueError:
                continue
    return out
