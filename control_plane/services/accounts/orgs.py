"""Organizations and their users (operator commands)."""

from control_plane.infra import clock, security
from control_plane.infra.db import database
from control_plane.models import Organization, User, UserToken
from control_plane.models.org import PERMISSIONS, USER_ACCESS
from control_plane.services import audit
from control_plane.services.accounts import keys, sessions
from control_plane.vocabulary.errors import ApiError, NotFound


def create_org(name, server_quota=10):
    if not name.strip():
        raise ApiError("--name must not be blank")
    if server_quota < 0:
        raise ApiError("--server-quota must be 0 or more")
    with database.atomic():
        org = Organization.create(name=name.strip(), server_quota=server_quota)
        audit.record(org.id, "organization.create", "organization", org.id,
                     {"name": org.name, "server_quota": server_quota})
        return org


def create_user(org_id, name, email, permissions=(), access="full_access"):
    if access not in USER_ACCESS:
        raise ApiError(f"access must be one of: {', '.join(USER_ACCESS)}")
    unknown = set(permissions) - set(PERMISSIONS)
    if unknown:
        raise ApiError(f"unknown permission(s): {', '.join(sorted(unknown))}; "
                       f"known: {', '.join(PERMISSIONS)}")
    with database.atomic():
        if Organization.get_or_none(Organization.id == org_id) is None:
            raise NotFound("organization not found")
        user = User.create(organization=org_id, name=name, email=email,
                           permissions=sorted(set(permissions)), access=access)
        audit.record(org_id, "user.create", "user", user.id,
                     {"name": name, "email": email, "permissions": user.permissions,
                      "access": access})
        return user


def _active_user(user_id):
    user = User.get_or_none(User.id == user_id)
    if user is None or user.deleted_at is not None:
        raise NotFound("user not found")
    return user


def issue_user_token(user_id):
    """A bearer token for the deployment-operations surface; shown once."""
    with database.atomic():
        user = _active_user(user_id)
        raw = "usr_live_" + security.random_token(40)
        UserToken.create(user=user, token_hash=security.digest(raw), prefix=raw[:16])
        audit.record(user.organization_id, "user.token_issue", "user", user.id)
    return raw


def delete_user(user_id):
    """Soft delete: the user's tokens stop working; keys they created answer
    409 key_has_no_owner on writes until rotated."""
    with database.atomic():
        user = _active_user(user_id)
        now = clock.now()
        user.deleted_at = now
        user.save(only=[User.deleted_at])
        UserToken.update(revoked_at=now).where(UserToken.user == user,
                                               UserToken.revoked_at.is_null()).execute()
        audit.record(user.organization_id, "user.delete", "user", user.id)


FIRST_USER_EMAIL = "admin@localhost"


def bootstrap(name="Default organization"):
    """First start: an organization with one full-access key and a first web console
    user (every permission, a generated password), if none exists. Returns (org,
    key, raw key, user, password), or None when there is already an organization."""
    with database.atomic():
        if Organization.select().exists():
            return None
        org = create_org(name)
        key, raw = keys.create_key(org.id, "bootstrap", "full_access", "organization",
                                   server_registration=True, support_tickets=True)
        user = create_user(org.id, "Administrator", FIRST_USER_EMAIL, PERMISSIONS)
        password = sessions.new_password()
        sessions.set_password(user.id, password)
    return org, key, raw, user, password


