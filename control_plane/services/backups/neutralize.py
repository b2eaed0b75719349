"""Restored copies made safe: every restore into a non-production environment
(a backup of its own, a copy of production, an Odoo zip import) has the agent
run Odoo's `odoo neutralize` on the restored database before the ERP serves it,
then its profile's clearing and checks (agent/backups/safe_copy.py): anything
still live fails the restore, and the environment is put back as it was. A
restore into production never neutralises.

What a copy must be is the environment's copy policy (`profile`: `standard` or
`strict`; `anonymize`: personal data rewritten, irreversibly), a floor that a
request or an automation rule may raise and not lower: `"neutralize": false`
(the task log names who said so) is refused where the policy is stricter than
the default. Strict copies and anonymised ones need an agent of this release:
an older one would skip them silently, so they are refused (409
`agent_upgrade_required`) while the server's agent is older.

What the environment shows as `neutralized` is what its agent read in the
database after the restore (the parameter `database.is_neutralized`): true,
false, or null where it could not be read (not known yet, or an agent from
before neutralisation, which ignores the request: its copy is live);
`anonymized` likewise."""

from control_plane.infra import clock
from control_plane.infra.db import database
from control_plane.models import Environment
from control_plane.services import agents, audit
from control_plane.services.environment_settings import access
from control_plane.services.tasks import engine
from control_plane.vocabulary import errors

PRODUCTION = "production"
PROFILES = ("standard", "strict")  # weakest first
DEFAULT_POLICY = {"profile": PROFILES[0], "anonymize": False}
DEPLOY = "project.environments.deploy"


def _refused(field, why, message="The copy would be less safe than asked."):
    return errors.Unprocessable(message, details={field: [why]})


def policy_of(env):
    return {"profile": env.copy_profile or PROFILES[0], "anonymize": bool(env.anonymize_copies)}


def decide(env, requested, profile=None, anonymize=None):
    """What a restore into `env` does with the copy: {"neutralize", "profile",
    "anonymize"}. `requested`, `profile`, `anonymize`: the request's or the rule's
    (None when absent); each may raise the environment's policy, not lower it (422)."""
    if env.environment_type == PRODUCTION:
        if requested is True:
            raise errors.Unprocessable(
                "A restore into production is never neutralised.",
                details={"neutralize": ["Only false (or nothing) for a production environment."]})
        for field, value in (("neutralize_profile", profile), ("anonymize", anonymize)):
            if value:
                raise _refused(field, "A restore into production is neither neutralised nor "
                               "anonymised.", "A restore into production is never neutralised.")
        return {"neutralize": False, "profile": None, "anonymize": False}
    floor = policy_of(env)
    if requested is False:
        if floor != DEFAULT_POLICY:
            raise _refused("neutralize", f"The environment's copy policy asks for a "
                           f"{floor['profile']} neutralisation"
                           + (" and anonymisation" if floor["anonymize"] else "") + ".")
        if profile or anonymize:
            raise _refused("neutralize", "A profile or an anonymisation needs a neutralised copy.",
                           "Contradictory fields.")
        return {"neutralize": False, "profile": None, "anonymize": False}
    if profile and PROFILES.index(profile) < PROFILES.index(floor["profile"]):
        raise _refused("neutralize_profile", f"The environment's copy policy asks for at least "
                       f"{floor['profile']}.")
    if anonymize is False and floor["anonymize"]:
        raise _refused("anonymize", "The environment's copy policy anonymises every copy.")
    wanted = {"neutralize": True, "profile": profile or floor["profile"],
              "anonymize": bool(anonymize or floor["anonymize"])}
    if (wanted["profile"] != PROFILES[0] or wanted["anonymize"]) and agents.env_agent_behind(env):
        raise errors.AgentUpgradeRequired(
            f"The server's agent ({env.server.agent_version}) would not make this copy "
            f"{wanted['profile']}" + (" nor anonymise it" if wanted["anonymize"] else "")
            + ": upgrade it first.")
    return wanted


def record(task, env, requested, actor):
    """The task log's first line on neutralisation, when the request turned it off."""
    if env.environment_type != PRODUCTION and requested is False:
        engine.log_line(task.id, "warning", "the restored database will not be neutralised: "
                        f'the request said "neutralize": false ({actor}); this copy keeps '
                        "its mail servers, scheduled actions and payment providers live")


def payload(extra):
    """What the agent is asked to do with the copy (a task's extra_data)."""
    return {"neutralize": bool(extra.get("neutralize")),
            "neutralize_profile": extra.get("profile") or PROFILES[0],
            "anonymize": bool(extra.get("anonymize"))}


def settled(d, result):
    """After a completed restore: the environment's `neutralized` and `anonymized` as
    its agent reported them. Returns {"neutralized", "anonymized", "profile"}."""
    extra = d.extra_data or {}
    wanted = bool(extra.get("neutralize"))
    result = result or {}
    value = result.get("neutralized")
    made = result.get("safe_copy") or {}
    if wanted and "neutralized" not in result:
        engine.log_line(d.id, "warning", "the server's agent predates neutralisation and did "
                        "not neutralise the restored database: upgrade it, then restore again")
    elif wanted and value is not True:
        engine.log_line(d.id, "warning", "the restored database does not say it is "
                        "neutralised (database.is_neutralized)")
    elif wanted and not made:
        engine.log_line(d.id, "warning", "the server's agent did not check the neutralised "
                        "copy (it predates the checks): upgrade it, then restore again")
    anonymized = made.get("anonymized") is not None if made or not wanted else None
    Environment.update(neutralized=value, anonymized=anonymized).where(
        Environment.id == d.environment_id).execute()
    return {"neutralized": value, "anonymized": anonymized, "profile": made.get("profile")}


# --- the environment's copy policy ----------------------------------------------

def describe(env):
    return {"environment_id": env.id, **policy_of(env)}


def get(actor, env_id):
    return describe(access.environment(actor, env_id))


def update(actor, env_id, changes):
    """Fields left out keep their value; a production environment has none (422)."""
    with database.atomic():
        env = access.environment(actor, env_id, DEPLOY, lock=True)
        if env.environment_type == PRODUCTION and changes:
            raise errors.Unprocessable(
                "Nothing is copied into production neutralised: it has no copy policy.",
                details={next(iter(changes)): ["Not for a production environment."]})
        columns = {}
        if "profile" in changes:
            columns["copy_profile"] = changes["profile"]
        if "anonymize" in changes:
            columns["anonymize_copies"] = bool(changes["anonymize"])
        if columns:
            Environment.update(updated_at=clock.now(), **columns).where(
                Environment.id == env.id).execute()
            for column, value in columns.items():
                setattr(env, column, value)
            audit.record(env.project.organization_id, "copy_policy.update", "environment",
                         env.id, changes)
        return describe(env)
