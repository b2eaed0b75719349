"""Who is asking, resolved once at the edge into an `Actor`: the public API's key,
a user of /api/v1 or the console, an operator with `berth admin`, the scheduler or
an automation rule. The services and `access.<thing>(actor, id, permission)` take
it; none is written per caller.

An actor carries its organization (None: every one, for an operator), what it may
see (a project-scoped key: one project), whether it may write, a user's
permissions (None: not asked, as for keys and operators), who is behind it (the
user id deployments record as `triggered_by`) and how logs and audit name it. It
reads like an API key where the services read keys (`organization_id`,
`project_scoped`, `project_id`, `owner_id`, `read_only`, `key_type`, the
capabilities), so a key's rules and a user's are one set of rules."""

import uuid
from dataclasses import dataclass

from control_plane.vocabulary.errors import NotFound, PermissionDenied


@dataclass(frozen=True)
class Actor:
    kind: str  # api_key | user | operator | scheduler | automation_rule
    organization_id: uuid.UUID | None = None  # None: every organization
    project_id: uuid.UUID | None = None  # a project-scoped key sees only this project
    read_only: bool = False
    permissions: frozenset | None = None  # a user's; None: not asked (keys, operators)
    user_id: uuid.UUID | None = None  # the person behind it (a key's owner)
    name: str = ""  # how task logs and messages name it
    email: str | None = None
    public_id: str = ""  # a key's `key_…`, `user:<id>` for a user
    server_registration: bool = True  # a key's capabilities (a user and an operator have them)
    support_tickets: bool = True
    key: object = None  # the ApiKey itself, for what only a key has

    @property
    def project_scoped(self):
        return self.project_id is not None

    @property
    def owner_id(self):
        return self.user_id

    @property
    def key_type(self):
        return "read_only" if self.read_only else "full_access"

    @property
    def is_operator(self):
        return self.kind == "operator"

    @property
    def label(self):
        """How records and task logs name who asked ("key key_…", "user ana@…",
        "automation rule 'nightly'")."""
        if self.kind == "api_key":
            return f"key {self.public_id}"
        if self.kind == "user":
            return f"user {self.email}"
        return self.name

    def require(self, permission, org_id=None):
        """A resource of another organization is 404 (as if it did not exist), then
        a user without the permission is 403 permission_denied."""
        if org_id is not None and self.organization_id not in (None, org_id):
            raise NotFound("Not found.")
        if permission is not None and self.permissions is not None \
                and permission not in self.permissions:
            raise PermissionDenied(f"This needs the '{permission}' permission.")
        return self


def of_key(key):
    return Actor("api_key", key.organization_id, key.project_id if key.project_scoped else None,
                 key.read_only, None, key.owner_id, key.name, None, key.public_id,
                 key.server_registration, key.support_tickets, key)


def of_user(user):
    """A user of /api/v1 (a token) or of the console (a session)."""
    return Actor("user", user.organization_id, None, user.read_only,
                 frozenset(user.permissions or ()), user.id, user.name, user.email,
                 f"user:{user.id}")


OPERATOR = Actor("operator", name="an operator, with berth admin", public_id="operator")


SCHEDULER = Actor("scheduler", name="the scheduler", public_id="scheduler")


def of_rule(rule):
    """An automation rule acting on its own (a push, a schedule, an event)."""
    return Actor("automation_rule", rule.organization_id, rule.project_id,
                 name=f"automation rule {rule.name!r}", public_id=f"automation_rule:{rule.id}")


def operator(org_id=None):
    """An operator with `berth admin`, acting for one organization when it names one."""
    return Actor("operator", org_id, name=OPERATOR.name, public_id=OPERATOR.public_id)
