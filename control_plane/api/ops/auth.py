"""Request hooks of the deployment-operations surface: a user token on every
request (the incoming Git webhooks authenticate by signature instead)."""

from flask import g, request

from control_plane.services.accounts import users


def authenticate_request():
    g.user = users.authenticate(users.presented_token(request.headers.get("Authorization")))


def current_user():
    return g.user


def init_blueprint(blp):
    blp.before_request(authenticate_request)
    return blp
