"""Reading and changing an environment's configuration (`configuration`), on
the deployment-operations surface and for operators.

A change is one transaction: validated (422), refused while a task of the
environment is pending or running (409), stored, and an environment that has
containers is redeployed with trigger `config_update` (the environment's table,
the per-organization limit); any refusal stores nothing. Each deployment keeps the
configuration it ran with: retry keeps it, rollback reverts to the target's
(the environment's configuration becomes the target's), a forced redeploy uses
the current one."""

from control_plane.infra.db import database
from control_plane.services import audit
from control_plane.services.deploys import actions
from control_plane.services.environment_settings import access, configuration
from control_plane.vocabulary import states
from protocol.kinds import TaskKind

E = states.EnvironmentStatus
# An environment with containers is redeployed on a change; one not deployed
# yet (or destroyed) takes its configuration at its next deployment.
REDEPLOYED = (E.RUNNING, E.STOPPED, E.ERROR, E.FAILED)


def update(env, changes, actor, *, berth, conflict):
    """(Inside the caller's transaction, the environment locked.) Returns the new
    `config_update` deployment, or None when nothing changed or the environment
    has no containers to redeploy."""
    new = configuration.merged(env, changes)
    if configuration.same(new, configuration.stored(env)):
        return None
    # A running task would deploy the old configuration and settle as if current.
    actions.refuse_if_busy(env, conflict)
    configuration.store(env, new)
    task = None
    if env.is_active and env.server_id and env.status in REDEPLOYED:
        with audit.quiet():  # the redeploy is part of the change
            task = actions.act(env, TaskKind.REDEPLOY, actor, berth=berth,
                               conflict=conflict, trigger=states.Trigger.CONFIG_UPDATE)
    audit.record(env.project.organization_id, "configuration.update", "environment", env.id,
                 {**changes, "task_id": task.id if task else None})
    return task


# --- what people ask (/api/v1, the console, `berth admin config`) -------------------

def read(actor, env_id):
    return configuration.describe(access.environment(actor, env_id))


def change(actor, env_id, changes, *, berth):
    """Returns (configuration as described, deployment or None)."""
    with database.atomic():
        env = access.environment(actor, env_id, "project.environments.deploy", lock=True)
        deployment = update(env, changes, actor, berth=berth,
                            conflict=actions.DEPLOYMENT_IN_PROGRESS)
        return configuration.describe(env), deployment
