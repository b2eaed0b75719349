"""Stored metrics: /servers/{id}/metrics/history, /environments/{id}/metrics/history
(read-only keys welcome). Read from the database, not live: the key's rate limit
alone applies, not the live reads' per-target limits."""

import datetime as dt

import marshmallow as ma
from flask import current_app
from flask.views import MethodView

from control_plane.api.auth import current_actor
from control_plane.api.fields import Schema, UTCDateTime, UTCInstant
from control_plane.api.smorest import Blueprint
from control_plane.infra import clock
from control_plane.models.metrics import ENVIRONMENT_SERIES, SERVER_SERIES
from control_plane.services.servers import history as svc

blp = Blueprint("metric_history", __name__, description="Metric history")

DEFAULT_RANGE = dt.timedelta(hours=24)
MAX_RANGE = dt.timedelta(days=90)
AUTO_POINTS = 300  # the default step: the smallest giving at most this many points


class HistoryArgs(ma.Schema):
    from_ = UTCInstant(data_key="from", metadata={
        "description": "Start of the range, ISO 8601 (UTC when no offset). "
                       "Default: 24 hours before `to`."})
    to = UTCInstant(metadata={
        "description": "End of the range (excluded). Default: now."})
    step = ma.fields.String(validate=ma.validate.OneOf(list(svc.STEPS)), metadata={
        "description": "Width of each point. Minute points are kept 48 hours (by "
                       "default), so steps under `1h` need `from` within them; hour points "
                       "90 days. Default: "
                       f"the smallest step that gives at most {AUTO_POINTS} points."})

    @ma.post_load
    def resolve(self, data, **kwargs):
        now = clock.now()
        end = data.get("to") or now
        try:
            start = data.get("from_") or end - DEFAULT_RANGE
        except OverflowError:  # `to` within a day of the year 1: no day before it
            raise ma.ValidationError("Too early: give a later `to` or a `from`.", "to") from None
        if start >= end:
            raise ma.ValidationError("Must be before `to`.", "from")
        if end - start > MAX_RANGE:
            raise ma.ValidationError("A range may span at most 90 days.", "from")
        seconds = (end - start).total_seconds()
        minutes_from = now - dt.timedelta(
            hours=current_app.config["METRICS_MINUTE_RETENTION_HOURS"])
        if "step" in data:
            step = svc.STEPS[data["step"]]
        else:
            step = next((s for s in svc.STEPS.values() if seconds / s <= AUTO_POINTS
                         and (s >= svc.HOUR or start >= minutes_from)), svc.STEPS["1d"])
        if seconds / step > svc.MAX_POINTS:
            raise ma.ValidationError(
                f"This range holds more than {svc.MAX_POINTS} points of that step; "
                "use a longer step or a shorter range.", "step")
        if step < svc.HOUR and start < minutes_from:
            raise ma.ValidationError("Points under an hour are kept only for the last "
                                     f"{current_app.config['METRICS_MINUTE_RETENTION_HOURS']} "
                                     "hours; use a step of 1h or more for a range that "
                                     "starts earlier.", "step")
        return {"start": start, "end": end, "step": step}


class FigureSchema(Schema):
    avg = ma.fields.Float(allow_none=True, required=True)
    min = ma.fields.Float(allow_none=True, required=True)
    max = ma.fields.Float(allow_none=True, required=True)


def _point_schema(name, series):
    fields = {"at": UTCDateTime(required=True, metadata={"description": "The point's start."})}
    fields.update({s: ma.fields.Nested(FigureSchema, required=True) for s in series})
    return Schema.from_dict(fields, name=name)


_DESCRIPTION = ("`avg` weights each sample alike; `min` and `max` are the lowest and "
                "highest minute averages in the point. A series with no sample in a point "
                "is null; a point with no sample at all is left out.")


class ServerHistorySchema(Schema):
    server_id = ma.fields.UUID(required=True)
    from_ = UTCDateTime(data_key="from", attribute="from", required=True)
    to = UTCDateTime(required=True)
    step = ma.fields.String(required=True)
    points = ma.fields.List(ma.fields.Nested(_point_schema("ServerPoint", SERVER_SERIES)),
                            required=True, metadata={"description": _DESCRIPTION})


class EnvironmentHistorySchema(Schema):
    environment_id = ma.fields.UUID(required=True)
    from_ = UTCDateTime(data_key="from", attribute="from", required=True)
    to = UTCDateTime(required=True)
    step = ma.fields.String(required=True)
    points = ma.fields.List(ma.fields.Nested(_point_schema("EnvironmentPoint",
                                                           ENVIRONMENT_SERIES)),
                            required=True, metadata={"description": _DESCRIPTION})


@blp.route("/servers/<uuid:server_id>/metrics/history")
class ServerHistory(MethodView):
    @blp.arguments(HistoryArgs, location="query")
    @blp.response(200, ServerHistorySchema)
    def get(self, args, server_id):
        """A server's host metrics over time, as its agent reported them."""
        return svc.server_history(current_actor(), server_id, args["start"], args["end"],
                                  args["step"])


@blp.route("/environments/<uuid:env_id>/metrics/history")
class EnvironmentHistory(MethodView):
    @blp.arguments(HistoryArgs, location="query")
    @blp.response(200, EnvironmentHistorySchema)
    def get(self, args, env_id):
        """The environment's containers (CPU, memory) and disk use over time."""
        return svc.environment_history(current_actor(), env_id, args["start"], args["end"],
                                       args["step"])
