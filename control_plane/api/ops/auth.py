"""Request hooks of the deployment-operations surface: a user token on every
request (the incoming Git webhooks authenticate by signature instead)."""

from flask import g, request

from control_plane.services import audit
from control_plane.services.accounts import users


def authenticate_request():
    user = g.user = users.authenticate(users.presented_token(request.headers.get("Authorization")))
    if request.method not in ("GET", "HEAD"):  # what it changes is the user's (services/audit.py)
        _bind(user)


def _bind(user):
    g.audit_token = audit.bind(audit.Actor("user", str(user.id), user.email,
                                           request.remote_addr, g.get("request_id")))


def audited_read():
    """A GET that is an audit event (a backup's download link): the user is its actor."""
    if "audit_token" not in g:
        _bind(g.user)


def current_user():
    return g.user


def init_blueprint(blp):
    blp.before_request(authenticate_request)
    return blp
