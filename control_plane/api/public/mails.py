"""The mail catcher: /environments/{id}/mails and one mail."""

import marshmallow as ma
from flask.views import MethodView

from control_plane.agent_link import current_berth
from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema, UTCDateTime
from control_plane.api.public.monitoring import live_errors
from control_plane.api.smorest import Blueprint
from control_plane.services.servers import mails as svc

blp = Blueprint("mails", __name__, description=(
    "The mail catcher: every e-mail a non-production environment's ERP sends goes to its "
    "server's agent and is kept there (the newest 500, for 7 days), never sent on."))

UNAVAILABLE = ("`no_mail_catcher`: a production environment (its mail goes out), or a "
               "server without a catcher (over SSH, or an agent to upgrade); `no_server`")
UNREACHABLE = ("`server_unreachable`: the server's agent could not be reached, or could not "
               "read its caught mails")


class Attachment(ma.Schema):
    name = ma.fields.String(required=True)
    size = ma.fields.Integer(required=True, metadata={"description": "Bytes."})


class MailSummarySchema(Schema):
    id = ma.fields.String(required=True)
    received_at = UTCDateTime(required=True)
    from_ = ma.fields.String(data_key="from", attribute="from", required=True)
    to = ma.fields.String(required=True, metadata={"description": "Where it would have gone."})
    subject = ma.fields.String(required=True)
    has_html = ma.fields.Boolean(required=True)
    attachments = ma.fields.List(ma.fields.Nested(Attachment), required=True)


class MailListSchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    mails = ma.fields.List(ma.fields.Nested(MailSummarySchema), required=True)


class Header(ma.Schema):
    name = ma.fields.String(required=True)
    value = ma.fields.String(required=True)


class MailSchema(MailSummarySchema):
    environment_id = ma.fields.UUID(required=True)
    headers = ma.fields.List(ma.fields.Nested(Header), required=True)
    text = ma.fields.String(required=True, metadata={"description": "The text part, or empty."})
    html = ma.fields.String(required=True, metadata={"description": (
        "The HTML part, or empty: the sender's markup, to be shown only where it cannot run "
        "scripts or fetch anything (the console uses a sandboxed frame).")})
    truncated = ma.fields.Boolean(required=True, metadata={"description": (
        "The text or HTML part was cut at 512 KiB.")})


class MailArgs(ma.Schema):
    limit = ma.fields.Integer(load_default=50, validate=ma.validate.Range(1, 500))


@blp.route("/environments/<uuid:env_id>/mails")
class Mails(MethodView):
    @live_errors((409, UNAVAILABLE), (502, UNREACHABLE))
    @blp.arguments(MailArgs, location="query")
    @blp.response(200, MailListSchema)
    def get(self, args, env_id):
        """The mails the environment's ERP sent, newest first (30 reads per minute)."""
        return svc.list_mails(current_actor(), env_id, current_berth(), args["limit"])


@blp.route("/environments/<uuid:env_id>/mails/<string:mail_id>")
class MailById(MethodView):
    @live_errors((409, UNAVAILABLE), (502, UNREACHABLE))
    @blp.response(200, MailSchema)
    def get(self, env_id, mail_id):
        """One mail whole: headers, text and HTML parts, attachments' names and sizes."""
        return svc.get_mail(current_actor(), env_id, mail_id, current_berth())
