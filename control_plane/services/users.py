"""Users of the deployment-operations surface: bearer tokens and permissions."""

from control_plane import clock, security
from control_plane.errors import Forbidden, NotFound, Unauthorized
from control_plane.models import User, UserToken

TOKEN_PREFIX = "usr_live_"


def presented_token(authorization):
    if authorization is None:
        raise Unauthorized("Pass a user token as 'Authorization: Bearer <token>'.",
                           code="missing_token")
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthorized("Authorization must be 'Bearer <token>'.", code="invalid_token")
    return value.strip()


def authenticate(raw):
    """The active user behind a token, or 401. Looked up by digest (no timing leak)."""
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > 128:
        raise Unauthorized("The token is not valid.", code="invalid_token")
    row = (UserToken.select(UserToken, User).join(User)
           .where(UserToken.token_hash == security.digest(raw)).first())
    if row is None or row.revoked_at is not None or row.user.deleted_at is not None:
        raise Unauthorized("The token is not valid.", code="invalid_token")
    if row.expires_at is not None and row.expires_at <= clock.now():
        raise Unauthorized("The token has expired.", code="token_expired")
    return row.user


def require(user, permission, org_id):
    """Membership first (another organization's resource is 404, as on the public
    API), then the permission (403 permission_denied)."""
    if user.organization_id != org_id:
        raise NotFound("Not found.")
    if permission is not None and permission not in (user.permissions or ()):
        raise Forbidden(f"This needs the '{permission}' permission.", code="permission_denied")
