"""Registration tokens: /servers/registration-tokens."""

import marshmallow as ma
from flask import current_app, request
from flask.views import MethodView

from control_plane.api.auth import current_actor
from control_plane.api.fields import Branch, Name, Schema, UTCDateTime
from control_plane.api.smorest import Blueprint
from control_plane.services.servers import registration as svc

blp = Blueprint("registration_tokens", __name__,
                description="Registration tokens (adding servers)")


@blp.before_request
def require_access():
    # After the key is authenticated and before the body is read: a key that may
    # not register servers learns nothing from validation errors.
    svc.require_registration_access(current_actor(), write=request.method != "GET")


class AutoDeploySchema(ma.Schema):
    project_id = ma.fields.UUID(required=True)
    environment_name = Name(load_default="production")
    environment_type = ma.fields.String(
        load_default="production",
        validate=ma.validate.OneOf(("development", "staging", "production")))
    branch = Branch(load_default=None, allow_none=True, metadata={
        "description": "Default: the project's default branch when the server registers."})


class TokenCreateSchema(ma.Schema):
    server_name = Name(load_default=None, allow_none=True, metadata={
        "description": "Name of the server once it registers; default: its hostname."})
    ssh_username = ma.fields.String(load_default="root", validate=[
        ma.validate.Length(1, 64),
        ma.validate.Regexp(r"^[A-Za-z_][A-Za-z0-9_.-]*$", error="Not a valid user name."),
    ])
    expires_in = ma.fields.String(load_default="24h",
                                  validate=ma.validate.OneOf(tuple(svc.EXPIRY_CHOICES)))
    auto_deploy = ma.fields.Nested(AutoDeploySchema, load_default=None, allow_none=True,
                                   metadata={"description": "Applied once the server registers."})


class TokenCreatedSchema(Schema):
    token_id = ma.fields.UUID(required=True)
    token = ma.fields.String(required=True, metadata={"description": "Shown once."})
    install_command = ma.fields.String(required=True)
    expires_at = UTCDateTime(required=True)
    status = ma.fields.String(required=True)


class TokenListEntrySchema(Schema):
    token_id = ma.fields.UUID(required=True, attribute="id")
    token_prefix = ma.fields.String(required=True)
    server_name = ma.fields.String(allow_none=True)
    status = ma.fields.String(required=True)
    expires_at = UTCDateTime(required=True)
    created_at = UTCDateTime(required=True)
    created_by_name = ma.fields.String(required=True)


@blp.route("/servers/registration-tokens")
class RegistrationTokens(MethodView):
    @blp.arguments(TokenCreateSchema, required=False)  # every field has a default
    @blp.response(201, TokenCreatedSchema)
    def post(self, body):
        """Create a single-use token for adding a server (org-scoped, full-access key
        with server registration enabled). The token is shown only in this response."""
        token, raw = svc.create_token(current_actor(), **body)
        return {"token_id": token.id, "token": raw, "status": token.status,
                "expires_at": token.expires_at,
                "install_command": svc.install_command(current_app.config["PUBLIC_URL"], raw)}

    @blp.response(200, TokenListEntrySchema(many=True))
    def get(self):
        """The organization's tokens, newest first: pending, consumed, expired and revoked."""
        return svc.list_tokens(current_actor())


@blp.route("/servers/registration-tokens/<uuid:token_id>")
class RegistrationTokenById(MethodView):
    @blp.response(204)
    def delete(self, token_id):
        """Revoke a pending token, freeing its quota slot. 404 once consumed."""
        svc.revoke_token(current_actor(), token_id)
