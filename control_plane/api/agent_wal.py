"""/agent/v1/wal/<environment_id>/{known,parts,complete,status,download}: where a
server's agent ships an environment's archived WAL and the filestore files that
appear between backups (services/backups/wal.py), reports its archiving, and
reads the archive back for a point-in-time restore (`Authorization: Bearer <agent credential>`). Like the backup
transfers, not part of either API surface's documents: only agents call it."""

import marshmallow as ma
from flask import Blueprint

from control_plane.agent_link import current_berth
from control_plane.api.agent_transfers import CompletedPart, calling_server, loaded
from control_plane.services.backups import transfers
from control_plane.services.backups import wal as svc

blp = Blueprint("agent_wal", __name__, url_prefix="/agent/v1/wal")

SHA256 = ma.validate.Regexp(r"^[0-9a-f]{64}$")
MAX_ASKED = 1000  # names in one question
WHEN = ma.fields.String(allow_none=True, validate=ma.validate.Length(max=40))


def _name(name):
    svc.check_name(name)


class ObjectBody(ma.Schema):
    object = ma.fields.String(required=True, validate=_name)


class KnownBody(ma.Schema):
    objects = ma.fields.List(ma.fields.String(validate=_name), required=True,
                             validate=ma.validate.Length(max=MAX_ASKED))


class PartBody(ObjectBody):
    part_number = ma.fields.Integer(required=True, strict=True,
                                    validate=ma.validate.Range(1, transfers.MAX_PARTS))


class CompleteBody(ObjectBody):
    parts = ma.fields.List(ma.fields.Nested(CompletedPart), required=True,
                           validate=ma.validate.Length(1, transfers.MAX_PARTS))
    size = ma.fields.Integer(required=True, strict=True, validate=ma.validate.Range(min=0))
    sha256 = ma.fields.String(required=True, validate=SHA256)
    archived_at = WHEN  # a WAL file: when PostgreSQL finished it
    path = ma.fields.String(validate=ma.validate.Length(1, 1024))  # a filestore file


class Archiver(ma.Schema):
    failed_count = ma.fields.Integer(strict=True, validate=ma.validate.Range(min=0))
    last_failed_wal = ma.fields.String(allow_none=True, validate=ma.validate.Length(max=64))
    last_failed_at = WHEN
    last_archived_wal = ma.fields.String(allow_none=True, validate=ma.validate.Length(max=64))
    last_archived_at = WHEN


class StatusBody(ma.Schema):
    pending = ma.fields.Integer(required=True, strict=True, validate=ma.validate.Range(min=0))
    oldest_pending_at = WHEN
    shipped = ma.fields.Integer(strict=True, validate=ma.validate.Range(min=0))
    newest_shipped = ma.fields.String(allow_none=True, validate=ma.validate.Length(max=64))
    error = ma.fields.String(allow_none=True, validate=ma.validate.Length(max=1000))
    archiver = ma.fields.Nested(Archiver, allow_none=True)


@blp.post("/<uuid:env_id>/known")
def known(env_id):
    server = calling_server()
    return svc.known(server, env_id, loaded(KnownBody)["objects"])


@blp.post("/<uuid:env_id>/parts")
def part(env_id):
    server = calling_server()
    body = loaded(PartBody)
    return svc.part_url(server, env_id, body["object"], body["part_number"], current_berth())


@blp.post("/<uuid:env_id>/complete")
def complete(env_id):
    server = calling_server()
    body = loaded(CompleteBody)
    return svc.complete(server, env_id, body["object"], body["parts"], body["size"],
                        body["sha256"], current_berth(), archived_at=body.get("archived_at"),
                        path=body.get("path"))


@blp.post("/<uuid:env_id>/download")
def download(env_id):
    server = calling_server()
    return svc.download_url(server, env_id, loaded(ObjectBody)["object"], current_berth())


@blp.post("/<uuid:env_id>/status")
def status(env_id):
    server = calling_server()
    return svc.report(server, env_id, loaded(StatusBody))
