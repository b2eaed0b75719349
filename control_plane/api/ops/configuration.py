"""An environment's configuration on the deployment-operations surface: its
variables, ERP options and PostgreSQL settings, read and changed."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.fields import Boolean, Schema, UTCDateTime
from control_plane.api.ops.auth import current_actor, init_blueprint
from control_plane.api.ops.deployments import DeploymentSchema
from control_plane.api.smorest import Blueprint, error_responses
from control_plane.services.deploys import config_change as svc
from control_plane.services.environment_settings import config_rules as rules

blp = init_blueprint(Blueprint("ops_configuration", __name__,
                               description="Configuration of environments"))

ERRORS = {
    401: "Missing, invalid, revoked or expired user token",
    403: "The user lacks `project.environments.deploy` (`permission_denied`)",
    404: "Environment not found, or in another organization (`not_found`)",
    409: "A deployment is already pending or running for the environment "
         "(`deployment_in_progress`); nothing changed",
    422: "A key outside the allow-lists, a value out of range, an invalid or reserved "
         "variable name, or one that looks like a credential (`invalid_configuration`, "
         "each problem in `details`; `validation_error` for a malformed body); nothing "
         "changed",
    429: "Per-organization limit of 10 deployments a minute (`target_rate_limit`); nothing "
         "changed",
}
errors = error_responses(blp, ERRORS)


def _keys_schema(name, table, what):
    """A body section with one nullable property per allowed key (null removes it)."""
    fields = {key: ma.fields.Raw(allow_none=True, metadata={**check.schema, "nullable": True})
              for key, check in sorted(table.items())}
    schema = ma.Schema.from_dict(fields, name=name)
    return ma.fields.Nested(schema, metadata={"description": what})


class VariableSchema(Schema):
    name = ma.fields.String(required=True)
    secret = ma.fields.Boolean(required=True)
    value = ma.fields.String(required=True, allow_none=True, metadata={
        "description": "null for a secret variable: its value is never shown again"})


class ConfigurationSchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    variables = ma.fields.List(ma.fields.Nested(VariableSchema), required=True, metadata={
        "description": "By name; the ERP container's environment"})
    erp_options = ma.fields.Dict(required=True, metadata={
        "description": "Written into the ERP's configuration file"})
    postgres_settings = ma.fields.Dict(required=True, metadata={
        "description": "Given to the PostgreSQL server"})
    updated_at = UTCDateTime(required=True, allow_none=True)


class VariableBody(ma.Schema):
    value = ma.fields.String(required=True, validate=ma.validate.Length(
        max=rules.MAX_VALUE_CHARS))
    secret = Boolean(load_default=False, metadata={
        "description": "Stored sealed, never shown, logged or sent in events"})


class ConfigurationBody(ma.Schema):
    variables = ma.fields.Dict(
        keys=ma.fields.String(validate=ma.validate.Length(1, 128)),
        values=ma.fields.Nested(VariableBody, allow_none=True),
        validate=ma.validate.Length(max=rules.MAX_VARIABLES), metadata={
            # The name's syntax, as JSON Schema's `propertyNames` (api/smorest.py);
            # which names are reserved or look like credentials stays a 422
            # `invalid_configuration` no schema states.
            "key_pattern": f"^{rules.VARIABLE_NAME.pattern}$",
            "description": f"At most {rules.MAX_VARIABLES} names. NAME: {{value, secret}} sets "
                           "a variable, NAME: null removes it; names are environment-variable "
                           "names (a letter or underscore, then letters, digits and "
                           "underscores, at most 128), not reserved (HOST, PORT, USER, "
                           "PASSWORD, PG…, BERTH_…) and not credentials"})
    erp_options = _keys_schema("ErpOptionsBody", rules.ERP_OPTIONS,
                               "Options of the ERP's configuration file; null removes one")
    postgres_settings = _keys_schema("PostgresSettingsBody", rules.POSTGRES_SETTINGS,
                                     "PostgreSQL settings; null removes one")


class ChangeResultSchema(Schema):
    configuration = ma.fields.Nested(ConfigurationSchema, required=True)
    deployment = ma.fields.Nested(DeploymentSchema, required=True, allow_none=True, metadata={
        "description": "The `config_update` deployment (status 201), or null (200) when "
                       "nothing changed or the environment is not deployed"})


@blp.route("/environments/<uuid:env_id>/config")
class Configuration(MethodView):
    @errors()
    @blp.response(200, ConfigurationSchema)
    def get(self, env_id):
        """Read an environment's configuration

        Any member of the organization; secret variables show `value: null`."""
        return svc.read(current_actor(), env_id)

    @errors(403, 409, 422, 429)
    @blp.arguments(ConfigurationBody, required=False)  # no body: nothing changes
    @blp.alt_response(200, schema=ChangeResultSchema, success=True,
                      description="Stored; nothing to redeploy")
    @blp.response(201, ChangeResultSchema, description="Stored and being redeployed")
    def patch(self, body, env_id):
        """Change an environment's configuration

        Only the names and keys given change (null removes one). An environment
        with containers is redeployed with trigger `config_update` (201); one
        not deployed yet takes the configuration at its next deployment (200).
        Permission `project.environments.deploy`."""
        config, deployment = svc.change(current_actor(), env_id, body,
                                        berth=current_berth())
        return {"configuration": config, "deployment": deployment}, 201 if deployment else 200
