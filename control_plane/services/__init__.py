"""The services: every change of data, one function each, inside `db.atomic()`.
One subpackage per domain (README.md's architecture has a line for each), each
importing only those below it (the `services` contracts in pyproject.toml). Beside
them: `audit` (the audit log), `housekeeping` (retention, a scheduler job), `agents`
(who a credential belongs to, and whether its server is connected) and `backlog`
(the shared queues' depth, for /metrics).

Every task kind is registered by the domain that owns it when that module is
imported; the imports below make sure the engine knows them all wherever a
task can end (the gateway, the scheduler, either API); so does the automation
package's watcher of the tasks that end."""

from control_plane.services import automation as _automation  # noqa: F401
from control_plane.services.backups import drills as _drills  # noqa: F401
from control_plane.services.backups import kinds as _backup_kinds  # noqa: F401
from control_plane.services.deploys import kinds as _deploy_kinds  # noqa: F401
