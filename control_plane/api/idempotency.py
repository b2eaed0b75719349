"""`X-Idempotency-Key` on the supported POSTs (spec rules 1-6).

The key is claimed in its own committed transaction (so a concurrent
duplicate sees it in flight: 409), then the view runs. A success is stored in
one transaction with the view's changes: either both happen or neither. A
refusal the operation made (400, 404, 409, 422...) rolled the view's
transaction back, so it changed nothing; it is stored afterwards, on the claim
committed before, and replayed like a success (rule 3). Not stored, so the
same key may be retried: refusals of who asks or when (401, 403, 429), which
say nothing of the operation, and server faults (5xx). A claim carries a
lease, so a request that died mid-way does not block its key forever. Records
are per API key and live 24 hours. The stored body is sealed (it can hold a
secret shown once, e.g. a new webhook's)."""

import copy
import datetime as dt
import functools

import peewee
from flask import Response, current_app, g, request
from werkzeug.exceptions import HTTPException

from control_plane.infra import clock, secretbox
from control_plane.infra.db import database, for_update
from control_plane.models import IdempotencyRecord
from control_plane.vocabulary.errors import ApiError, IdempotencyKeyInUse, InvalidIdempotencyKey

TTL = dt.timedelta(hours=24)
SEAL_PURPOSE = "idempotency-response"
REPLAYED_HEADERS = ("Content-Type", "Location")
# Answers that say who may ask or when, not what the operation did: never stored.
NOT_STORED = frozenset((401, 403, 429))
# OpenAPI vendor extension on the operations that honour the header; the
# StandardResponses plugin (api/smorest.py) turns it into the header docs.
IDEMPOTENT_MARKER = "x-idempotent"


def _lease():
    return dt.timedelta(seconds=current_app.config["IDEMPOTENCY_LEASE_SECONDS"])


def _claim(api_key, idem_key):
    """Returns (record, replay): a record we now own, or a finished one to replay."""
    now = clock.now()
    try:
        with database.atomic():
            rec = for_update(IdempotencyRecord.select().where(
                IdempotencyRecord.api_key == api_key.id, IdempotencyRecord.key == idem_key)).first()
            if rec is not None and rec.expires_at <= now:  # rule 4: after 24 h, a new key
                rec.delete_instance()
                rec = None
            if rec is None:
                # Keep the table bounded: this key's records past their 24 hours go.
                IdempotencyRecord.delete().where(IdempotencyRecord.api_key == api_key.id,
                                                 IdempotencyRecord.expires_at <= now).execute()
                rec = IdempotencyRecord.create(
                    api_key=api_key.id, key=idem_key, method=request.method, path=request.path,
                    locked_until=now + _lease(), expires_at=now + TTL)
                return rec, False
            if rec.state == "done":
                return rec, True
            if rec.locked_until > now:
                raise IdempotencyKeyInUse()
            # The first request died without finishing: take its key over.
            rec.locked_until = now + _lease()
            rec.save(only=[IdempotencyRecord.locked_until])
            return rec, False
    except peewee.IntegrityError:  # a concurrent first request inserted it
        raise IdempotencyKeyInUse() from None


def _finish(rec, response):
    """Store the response, only if the claim is still ours (no takeover happened)."""
    headers = {h: response.headers[h] for h in REPLAYED_HEADERS if h in response.headers}
    won = (IdempotencyRecord.update(
        state="done", response_status=response.status_code,
        response_body=secretbox.seal(response.get_data(as_text=True), SEAL_PURPOSE),
        response_headers=headers)
        .where(IdempotencyRecord.id == rec.id, IdempotencyRecord.state == "in_flight",
               IdempotencyRecord.locked_until == rec.locked_until)
        .execute())
    if not won:
        raise IdempotencyKeyInUse()


def _stored(status):
    return 200 <= status < 500 and status not in NOT_STORED


def _release(rec):
    (IdempotencyRecord.delete()
     .where(IdempotencyRecord.id == rec.id, IdempotencyRecord.state == "in_flight",
            IdempotencyRecord.locked_until == rec.locked_until)
     .execute())


def _replay(rec):
    body = secretbox.unseal(rec.response_body, SEAL_PURPOSE)
    response = Response(rec.response_body if body is None else body, status=rec.response_status,
                        headers=rec.response_headers or {})
    response.headers["X-Idempotency-Replayed"] = "true"
    return response


def idempotent(view):
    """Decorate a POST view, right under `@blp.route`: a replay needs no valid body."""

    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        idem_key = request.headers.get("X-Idempotency-Key")
        if idem_key is None or request.method != "POST":
            return view(*args, **kwargs)  # rule 6: ignored elsewhere
        idem_key = idem_key.strip()
        if not 1 <= len(idem_key) <= 255:
            raise InvalidIdempotencyKey("X-Idempotency-Key must be 1 to 255 characters.")
        rec, replay = _claim(g.api_key, idem_key)
        if replay:
            return _replay(rec)
        try:
            with database.atomic():  # the view's wake-ups wait for this commit
                response = view(*args, **kwargs)
                if _stored(response.status_code):
                    _finish(rec, response)
        except (ApiError, HTTPException) as exc:
            # The view's transaction rolled back: the refusal changed nothing, and
            # is stored on its own, on the claim committed before the view ran.
            response = current_app.make_response(current_app.handle_user_exception(exc))
            if isinstance(exc, IdempotencyKeyInUse) or not _stored(response.status_code):
                _release(rec)
            else:
                with database.atomic():
                    _finish(rec, response)
            return response
        except BaseException:
            _release(rec)  # nothing was done: the same key may be retried
            raise
        if not _stored(response.status_code):
            _release(rec)
        return response

    # Documented the way `blp.doc` records docs (flask-smorest reads `_apidoc`),
    # without its extra wrapper. functools.wraps shared the view's dict: copy it.
    wrapper._apidoc = copy.deepcopy(getattr(view, "_apidoc", {}))
    wrapper._apidoc.setdefault("manual_doc", {})[IDEMPOTENT_MARKER] = True
    return wrapper

