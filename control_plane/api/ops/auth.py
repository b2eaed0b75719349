"""Request hooks of the deployment-operations surface: a user token on every
request (the incoming Git webhooks authenticate by signature instead)."""

from flask import g, request

from control_plane.services import audit
from control_plane.services.accounts import actors, users


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


def current_actor():
    """The request's user as an Actor (services/accounts/actors.py), resolved once."""
    actor = g.get("actor")
    if actor is None:
        actor = g.actor = actors.of_user(g.user)
    return actor


def init_blueprint(blp):
    blp.before_request(authenticate_request)
    return blp
