"""Users of the deployment-operations surface: bearer tokens and permissions."""

from control_plane.infra import clock, security
from control_plane.models import User, UserToken
from control_plane.vocabulary.errors import (
    InvalidToken,
    MissingToken,
    NotFound,
    PermissionDenied,
    TokenExpired,
)

TOKEN_PREFIX = "usr_live_"


def presented_token(authorization):
    if authorization is None:
        raise MissingToken("Pass a user token as 'Authorization: Bearer <token>'.")
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise InvalidToken("Authorization must be 'Bearer <token>'.")
    return value.strip()


def authenticate(raw):
    """The active user behind a token, or 401. Looked up by digest (no timing leak)."""
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > 128:
        raise InvalidToken()
    row = (UserToken.select(UserToken, User).join(User)
           .where(UserToken.token_hash == security.digest(raw)).first())
    if row is None or row.revoked_at is not None or row.user.deleted_at is not None:
        raise InvalidToken()
    if row.expires_at is not None and row.expires_at <= clock.now():
        raise TokenExpired("The token has expired.")
    return row.user


def require(user, permission, org_id):
    """Membership first (another organization's resource is 404, as on the public
    API), then the permission (403 permission_denied)."""
    if user.organization_id != org_id:
        raise NotFound("Not found.")
    if permission is not None and permission not in (user.permissions or ()):
        raise PermissionDenied(f"This needs the '{permission}' permission.")
