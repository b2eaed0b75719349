"""/agent/v1/transfers/<backup_id>/{parts,complete,download,objects}: where a server's
agent gets the URLs to upload a backup's objects and read them back, and learns
which filestore objects its project already holds
(`Authorization: Bearer <agent credential>`). Not part of either API surface's
documents: only agents call it."""

import marshmallow as ma
from flask import Blueprint, request

from control_plane.agent_link import current_berth
from control_plane.services import agents
from control_plane.services.backups import transfers
from control_plane.vocabulary import errors

blp = Blueprint("agent_transfers", __name__, url_prefix="/agent/v1/transfers")

SHA256 = ma.validate.Regexp(r"^[0-9a-f]{64}$")
MAX_ASKED = 10_000  # hashes in one question (the agent asks 5,000 at a time)


def _object_name(name):
    if not transfers.known_name(name):
        raise ma.ValidationError("Unknown backup object.")


class ObjectBody(ma.Schema):
    object = ma.fields.String(required=True, validate=_object_name)


class PartBody(ObjectBody):
    part_number = ma.fields.Integer(required=True, strict=True,
                                    validate=ma.validate.Range(1, transfers.MAX_PARTS))


class ObjectsBody(ma.Schema):
    sha256 = ma.fields.List(ma.fields.String(validate=SHA256), required=True,
                            validate=ma.validate.Length(max=MAX_ASKED))


class CompletedPart(ma.Schema):
    part_number = ma.fields.Integer(required=True, strict=True,
                                    validate=ma.validate.Range(1, transfers.MAX_PARTS))
    etag = ma.fields.String(required=True, validate=ma.validate.Length(1, 256))


class CompleteBody(ObjectBody):
    parts = ma.fields.List(ma.fields.Nested(CompletedPart), required=True,
                           validate=ma.validate.Length(1, transfers.MAX_PARTS))
    size = ma.fields.Integer(required=True, strict=True, validate=ma.validate.Range(min=0))
    sha256 = ma.fields.String(required=True, validate=SHA256)


def calling_server():
    header = request.headers.get("Authorization", "")
    scheme, _, credential = header.partition(" ")
    server = agents.server_for_credential(credential.strip()) if scheme == "Bearer" else None
    if server is None:
        raise errors.AgentCredentialInvalid("A server's agent credential is required.")
    return server


def loaded(schema):
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        raise errors.Unprocessable("A JSON object is required.")
    try:
        return schema().load(data)
    except ma.ValidationError as exc:
        raise errors.Unprocessable("Invalid fields.", details=exc.messages) from None


@blp.post("/<uuid:backup_id>/parts")
def part(backup_id):
    server = calling_server()
    body = loaded(PartBody)
    return transfers.part_url(server, backup_id, body["object"], body["part_number"], current_berth())


@blp.post("/<uuid:backup_id>/complete")
def complete(backup_id):
    server = calling_server()
    body = loaded(CompleteBody)
    return transfers.complete(server, backup_id, body["object"], body["parts"], body["size"],
                              body["sha256"], current_berth())


@blp.post("/<uuid:backup_id>/download")
def download(backup_id):
    server = calling_server()
    body = loaded(ObjectBody)
    return transfers.download_url(server, backup_id, body["object"], current_berth())


@blp.post("/<uuid:backup_id>/objects")
def known_objects(backup_id):
    """Which of the filestore objects the backup's project already holds."""
    server = calling_server()
    body = loaded(ObjectsBody)
    return transfers.known(server, backup_id, body["sha256"])
