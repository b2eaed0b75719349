"""Restored copies made safe: every restore into a non-production environment
(a backup of its own, a copy of production, an Odoo zip import) has the agent
run Odoo's `odoo neutralize` on the restored database before the ERP serves it,
unless the request says `"neutralize": false` (the task log names who said so).
A restore into production never neutralises.

What the environment shows as `neutralized` is what its agent read in the
database after the restore (the parameter `database.is_neutralized`): true,
false, or null where it could not be read (not known yet, or an agent from
before neutralisation, which ignores the request: its copy is live)."""

from control_plane.models import Environment
from control_plane.services.tasks import engine
from control_plane.vocabulary import errors

PRODUCTION = "production"


def decide(env, requested):
    """Whether a restore into `env` neutralises: `requested` is the request's
    `neutralize` (None when absent). True for production is refused (422)."""
    if env.environment_type == PRODUCTION:
        if requested is True:
            raise errors.Unprocessable(
                "A restore into production is never neutralised.",
                details={"neutralize": ["Only false (or nothing) for a production environment."]})
        return False
    return requested is not False


def record(task, env, requested, actor):
    """The task log's first line on neutralisation, when the request turned it off."""
    if env.environment_type != PRODUCTION and requested is False:
        engine.log_line(task.id, "warning", "the restored database will not be neutralised: "
                        f'the request said "neutralize": false ({actor}); this copy keeps '
                        "its mail servers, scheduled actions and payment providers live")


def settled(d, result):
    """After a completed restore: the environment's `neutralized` as its agent read
    it. Returns that value (None when unknown)."""
    wanted = bool((d.extra_data or {}).get("neutralize"))
    value = result.get("neutralized") if result else None
    if wanted and "neutralized" not in (result or {}):
        engine.log_line(d.id, "warning", "the server's agent predates neutralisation and did "
                        "not neutralise the restored database: upgrade it, then restore again")
    elif wanted and value is not True:
        engine.log_line(d.id, "warning", "the restored database does not say it is "
                        "neutralised (database.is_neutralized)")
    Environment.update(neutralized=value).where(Environment.id == d.environment_id).execute()
    return value
