"""An environment's copy policy on the deployment-operations surface: how every
copy restored into it is neutralised and checked, and whether it is anonymised."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.api.fields import Boolean, Schema
from control_plane.api.ops.auth import current_actor, init_blueprint
from control_plane.api.smorest import Blueprint, error_responses
from control_plane.services.backups import neutralize as svc

blp = init_blueprint(Blueprint("ops_copy_policy", __name__,
                               description="What a copy restored into an environment must be"))

ERRORS = {
    401: "Missing, invalid, revoked or expired user token",
    403: "The user lacks `project.environments.deploy` (`permission_denied`)",
    404: "Environment not found or in another organization (`not_found`)",
    422: "Invalid fields, or any field for a production environment (`validation_error`); "
         "nothing changes",
}
PROFILE = ("`standard` (Odoo's neutralisation checked: no active outgoing mail server but "
           "the dummy, no scheduled action but the autovacuum, no payment provider or carrier "
           "in live mode, no known credential parameter) or `strict` (also incoming mail "
           "servers, credential columns, parameters named like credentials and users' API "
           "keys, cleared first, then checked). Default `standard`.")
ANONYMIZE = ("Every copy's personal data rewritten, irreversibly (partners, users' logins "
             "but base's own, messages, queued mails, tracked values, bank accounts). "
             "Default false.")


class CopyPolicySchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    profile = ma.fields.String(required=True, metadata={"description": PROFILE})
    anonymize = ma.fields.Boolean(required=True, metadata={"description": ANONYMIZE})


class CopyPolicyBody(ma.Schema):
    """Any of the fields; those left out keep their value."""

    profile = ma.fields.String(validate=ma.validate.OneOf(["standard", "strict"]),
                               metadata={"description": PROFILE})
    anonymize = Boolean(metadata={"description": ANONYMIZE})


errors = error_responses(blp, ERRORS)


@blp.route("/environments/<uuid:env_id>/copy-policy")
class CopyPolicy(MethodView):
    @errors()
    @blp.response(200, CopyPolicySchema)
    def get(self, env_id):
        """Read an environment's copy policy

        Any member of the organization."""
        return svc.get(current_actor(), env_id)

    @errors(403, 422)
    @blp.arguments(CopyPolicyBody, required=False)  # no body: nothing changes
    @blp.response(200, CopyPolicySchema)
    def put(self, body, env_id):
        """Change an environment's copy policy

        The floor for every copy restored into this staging or development
        environment (a request, a rule or a preview may ask for more, not less):
        after Odoo's neutralisation the agent clears what the profile clears and
        checks the copy, failing the restore if anything is still live; with
        `anonymize`, personal data is rewritten before the ERP serves it
        (permission `project.environments.deploy`)."""
        return svc.update(current_actor(), env_id, body)
