"""What an outgoing webhook request carries, per format (docs/webhooks.md shows
each layout).

- `raw`: the JSON envelope `{event_id, event, timestamp, organization_id, data}`,
  signed twice: `X-SVC-Signature: sha256=<hex HMAC-SHA256 of the body keyed with
  the secret string>` and the Standard Webhooks headers `webhook-id`,
  `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of
  "{id}.{timestamp}.{body}" keyed with the base64-decoded part of `whsec_...`>`.
- `blocks` (Slack-style), `cards` (Teams adaptive card), `embed` (Discord): a chat
  message with the event name, a colour (green success, red failure, grey
  otherwise) and the key details of `data`. Unsigned: chat services ignore them.
"""

import base64
import binascii
import calendar
import hashlib
import hmac
import json

from control_plane import events
from control_plane.infra import clock
from control_plane.vocabulary import states

USER_AGENT = "Berth-Webhooks/1"
SECRET_PREFIX = "whsec_"

GREEN, RED, GREY = "#2EB67D", "#E01E5A", "#9E9E9E"

# data key -> label, in display order; keys not listed here are shown after them.
LABELS = (
    ("name", "Name"), ("server_name", "Server"), ("status", "Status"), ("from", "From"),
    ("to", "To"),
    ("duration_seconds", "Duration"), ("environment_id", "Environment"),
    ("project_id", "Project"), ("task_id", "Task"), ("environment_status", "Environment status"),
    ("cancelled_by", "Cancelled by"), ("rule_name", "Rule"), ("action_type", "Action"),
    ("trigger_type", "Trigger"), ("branch", "Branch"), ("actor", "Actor"),
    ("message", "Message"), ("webhook_id", "Webhook"),
)
MAX_FIELDS = 10  # Slack's limit for section fields; kept for all three formats
# The colour of a chat message: the statuses, of any resource, that read as good or bad.
SUCCESS = {states.TaskStatus.COMPLETED, states.DeploymentStatus.SUCCESS,
           states.CommandStatus.SUCCEEDED, states.EnvironmentStatus.RUNNING,
           states.DeliveryStatus.DELIVERED}
FAILURE = {states.TaskStatus.FAILED, states.EnvironmentStatus.ERROR}


def envelope(event) -> dict:
    """The `raw` body; the same on every attempt (receivers deduplicate on event_id)."""
    return {"event_id": str(event.event_id), "event": event.name,
            "timestamp": event.created_at.isoformat(timespec="milliseconds") + "Z",
            "organization_id": str(event.organization_id), "data": event.data or {}}


def render(webhook, envelope: dict, secret: str, raw=None) -> tuple[bytes, dict]:
    """The request body and headers for `webhook.format` (unknown formats: raw).
    `raw`: `dump(envelope)` already made (an event's webhooks share it)."""
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    builder = FORMATS.get(webhook.format or "raw")
    if builder is None:
        body = raw if raw is not None else dump(envelope)
        headers.update(signature_headers(body, secret, str(envelope["event_id"])))
        return body, headers
    return dump(builder(envelope)), headers


def dump(payload) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def signature_headers(body: bytes, secret: str, msg_id: str, timestamp: int | None = None):
    if timestamp is None:
        timestamp = calendar.timegm(clock.now().timetuple())
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    signed = f"{msg_id}.{timestamp}.".encode() + body
    v1 = base64.b64encode(hmac.new(_signing_key(secret), signed, hashlib.sha256).digest())
    return {"X-SVC-Signature": f"sha256={digest}", "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp), "webhook-signature": f"v1,{v1.decode()}"}


def _signing_key(secret: str) -> bytes:
    """Standard Webhooks: the bytes base64-encoded after `whsec_`. A secret that is
    not in that form signs with its own bytes."""
    raw = secret[len(SECRET_PREFIX):] if secret.startswith(SECRET_PREFIX) else secret
    try:
        return base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True) or secret.encode()
    except (binascii.Error, ValueError):
        return secret.encode()


# -- chat formats ---------------------------------------------------------------------

def tone(envelope) -> str:
    """`success`, `failure` or `neutral`: from the event's outcome."""
    event, data = envelope["event"], envelope.get("data") or {}
    if event.endswith((".completed",)):
        return "success"
    if event.endswith(".failed"):
        return "failure"
    if event == events.Name.ENVIRONMENT_STATUS_CHANGED:
        to = str(data.get("to", ""))
        return "success" if to in SUCCESS else "failure" if to in FAILURE else "neutral"
    return "neutral"


def title(envelope) -> str:
    return events.title(envelope["event"])


def summary(envelope) -> str:
    data = envelope.get("data") or {}
    if envelope["event"] == events.Name.ENVIRONMENT_STATUS_CHANGED and "to" in data:
        return f"Environment status: {data.get('from') or '-'} → {data['to']}"
    name = data.get("name") or data.get("server_name")  # what it is about, if named
    if name:
        return f"{title(envelope)}: {name}"
    return title(envelope)


def facts(envelope) -> list[tuple[str, str]]:
    """(label, text) pairs for the details shown, at most MAX_FIELDS."""
    data = envelope.get("data") or {}
    known = dict(LABELS)
    keys = [k for k, _ in LABELS if k in data] + sorted(k for k in data if k not in known)
    out = []
    for key in keys:
        value = data[key]
        if value is None or isinstance(value, dict | list):
            continue
        text = f"{value} s" if key == "duration_seconds" else str(value)
        out.append((known.get(key, key.replace("_", " ").capitalize()), text))
    return out[:MAX_FIELDS]


def _colour(envelope):
    return {"success": GREEN, "failure": RED}.get(tone(envelope), GREY)


def blocks(envelope) -> dict:
    """Slack incoming webhook: `text` (notification fallback) and one attachment
    whose `color` is the sidebar, holding header, summary, fields and context."""
    details = [{"type": "mrkdwn", "text": f"*{label}*\n{text}"} for label, text in facts(envelope)]
    content = [
        {"type": "header", "text": {"type": "plain_text", "text": envelope["event"]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": summary(envelope)}},
    ]
    if details:
        content.append({"type": "section", "fields": details})
    content.append({"type": "context", "elements": [{"type": "mrkdwn", "text": (
        f"Event `{envelope['event_id']}` · {envelope['timestamp']}")}]})
    return {"text": f"{envelope['event']}: {summary(envelope)}",
            "attachments": [{"color": _colour(envelope), "blocks": content}]}


def cards(envelope) -> dict:
    """Teams incoming webhook: a message with one adaptive card (1.4): a container
    styled good/attention/default holding the title (coloured the same), the
    summary, then a FactSet of the details."""
    style = {"success": "good", "failure": "attention"}.get(tone(envelope), "default")
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard", "version": "1.4",
        "body": [
            {"type": "Container", "style": style, "bleed": True, "items": [
                {"type": "TextBlock", "text": envelope["event"], "weight": "Bolder",
                 "size": "Medium", "color": style, "wrap": True},
                {"type": "TextBlock", "text": summary(envelope), "wrap": True},
            ]},
            {"type": "FactSet", "facts": [{"title": label, "value": text}
                                          for label, text in facts(envelope)]},
            {"type": "TextBlock", "text": f"Event {envelope['event_id']} · {envelope['timestamp']}",
             "isSubtle": True, "size": "Small", "wrap": True},
        ],
    }
    return {"type": "message", "attachments": [{
        "contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
        "content": card}]}


def embed(envelope) -> dict:
    """Discord channel webhook: one embed; `color` is the colour as an integer."""
    return {"embeds": [{
        "title": envelope["event"],
        "description": summary(envelope),
        "color": int(_colour(envelope).lstrip("#"), 16),
        "fields": [{"name": label, "value": text, "inline": True}
                   for label, text in facts(envelope)],
        "timestamp": envelope["timestamp"],
        "footer": {"text": f"Event {envelope['event_id']}"},
    }]}


FORMATS = {"blocks": blocks, "cards": cards, "embed": embed}
