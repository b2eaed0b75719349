"""The services: every change of data, one function each, inside `db.atomic()`.
One package per domain, each importing only those below it (import-linter's
`services` contract in pyproject.toml):

    servers          server records, registration tokens, live monitoring
    deploys          an environment and what is done to it: its deploy kinds,
                     the actions on both API surfaces, configuration changes
    projects         projects, add-on repositories, deploys on git push
    backups          backups, restores, Odoo's zip format, storage transfers
    environment_settings  who may touch an environment, its configuration,
                     custom domains and the proxy's routes
    tasks            the task engine: the agent command queue, the one `start`
                     and `settle`, the kinds registry, the reaper
    accounts         organizations, users, API keys

`automation` (rules that act on a push, a schedule or an event) sits above
them all: its actions are the other domains' tasks.

`webhooks` (outgoing webhooks) and `support` (tickets, release notes) stand
apart: they import none of the others, and none imports them.

Every task kind is registered by the domain that owns it when that module is
imported; the two imports below make sure the engine knows them all wherever a
task can end (the gateway, the scheduler, either API); so does the automation
package's watcher of the tasks that end."""

from control_plane.services import automation as _automation  # noqa: F401
from control_plane.services.backups import tasks as _backup_kinds  # noqa: F401
from control_plane.services.deploys import kinds as _deploy_kinds  # noqa: F401
