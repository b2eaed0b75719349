"""Custom domains on the deployment-operations surface: list and add an
environment's domains, verify one by DNS, remove one."""

import marshmallow as ma
from flask import current_app
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.ops.auth import current_actor, init_blueprint
from control_plane.api.smorest import Blueprint, error_responses
from control_plane.services.environment_settings import access
from control_plane.services.environment_settings import domains as svc
from control_plane.vocabulary import states

blp = init_blueprint(Blueprint("ops_domains", __name__,
                               description="Custom domains of environments"))

ERRORS = {
    401: "Missing, invalid, revoked or expired user token",
    403: "The user lacks `project.environments.deploy` (`permission_denied`)",
    404: "Environment or domain not found, or in another organization (`not_found`)",
    409: "The name is already this organization's, in this or another of its environments "
         "(`domain_in_use`: adding), or verified for another environment although DNS shows "
         "it yours (`domain_in_use`: verifying); the environment has 20 domains "
         "(`domain_limit_reached`); or DNS does not show the record yet "
         "(`domain_not_verified`, with the records expected in `details`)",
    422: "Not a host name, a reserved or special-use name, an IP address, or a name under "
         "the platform's apps domain (`invalid_domain`); invalid fields (`validation_error`)",
    502: "The DNS resolver did not answer (`dns_unavailable`); nothing changed",
}
errors = error_responses(blp, ERRORS)


class RecordSchema(Schema):
    name = ma.fields.String(required=True)
    value = ma.fields.String(metadata={"description": "The TXT record's text"})
    target = ma.fields.String(metadata={"description": "The CNAME's target"})


class VerificationSchema(Schema):
    txt = ma.fields.Nested(RecordSchema, required=True, metadata={
        "description": "A TXT record at this name holding this value proves control"})
    cname = ma.fields.Nested(RecordSchema, required=True, metadata={
        "description": "Or: the domain as a CNAME to the environment's platform host"})


class DomainSchema(Schema):
    domain = ma.fields.String(required=True, metadata={
        "description": "Lower case; an internationalized name in its IDNA (xn--) form"})
    environment_id = ma.fields.UUID(required=True)
    status = ma.fields.String(required=True, metadata={
        "enum": [s.value for s in states.DomainStatus]})
    verification = ma.fields.Nested(VerificationSchema, required=True)
    created_at = UTCDateTime(required=True)
    verified_at = UTCDateTime(required=True, allow_none=True)
    checked_at = UTCDateTime(required=True, allow_none=True, metadata={
        "description": "The last failed check"})
    check_error = ma.fields.String(required=True, allow_none=True, metadata={
        "description": "What the last failed check found in DNS"})


class DomainList(Schema):
    items = ma.fields.List(ma.fields.Nested(DomainSchema), required=True)


class AddDomainBody(ma.Schema):
    domain = ma.fields.String(required=True, validate=ma.validate.Length(1, 300), metadata={
        "description": "A host name such as erp.example.com (not under the platform's apps "
                       "domain)"})


def _apps():
    return current_app.config["APPS_DOMAIN"]



def _described(domain, env):
    return svc.describe(domain, env, _apps())


@blp.route("/environments/<uuid:env_id>/domains")
class Domains(MethodView):
    @errors()
    @blp.response(200, DomainList)
    def get(self, env_id):
        """List an environment's custom domains

        Oldest first. Any member of the organization."""
        env = access.environment(current_actor(), env_id)
        return {"items": [_described(d, env) for d in svc.list_of(env)]}

    @errors(403, 409, 422)
    @blp.arguments(AddDomainBody)
    @blp.response(201, DomainSchema)
    def post(self, body, env_id):
        """Add a custom domain

        The domain is `pending` until DNS shows the TXT record or the CNAME in
        `verification`; then `POST …/verify`. A pending claim holds nothing: other
        organizations may claim the name too, the first to verify it gets it (the
        other claims are dropped), and a claim not verified in 7 days is deleted.
        Permission `project.environments.deploy`."""
        env = access.environment(current_actor(), env_id, "project.environments.deploy")
        return _described(svc.add(env, body["domain"], _apps()), env)


@blp.route("/environments/<uuid:env_id>/domains/<string:domain>/verify")
class VerifyDomain(MethodView):
    @errors(403, 409, 502)
    @blp.response(200, DomainSchema)
    def post(self, env_id, domain):
        """Verify a custom domain by DNS

        Looks up the TXT record and the CNAME now; `verified` once either is
        seen, and the environment's `url` becomes its oldest verified domain.
        A verified domain answers 200 again without a lookup."""
        env = access.environment(current_actor(), env_id, "project.environments.deploy")
        return _described(svc.verify(env, domain, current_berth()), env)


@blp.route("/environments/<uuid:env_id>/domains/<string:domain>")
class Domain(MethodView):
    @errors(403)
    @blp.response(204)
    def delete(self, env_id, domain):
        """Remove a custom domain

        The name is free again at once, for any environment; `url` falls back
        to the next verified domain, else the platform subdomain."""
        env = access.environment(current_actor(), env_id, "project.environments.deploy")
        svc.remove(env, domain, current_berth())
