"""The organization's notification channels: one form per type to add one, a test
message, pause, resume and delete, and a channel's page with its deliveries."""

from flask import redirect, request, url_for

from control_plane.api.public.channels import NotificationChannelCreateSchema
from control_plane.console import (
    FormInvalid,
    actor,
    berth,
    blp,
    confirm,
    form_errors,
    load,
    render,
)
from control_plane.services.webhooks import channel_types, mail
from control_plane.services.webhooks import channels as svc
from control_plane.services.webhooks import subscriptions as webhooks
from control_plane.vocabulary.errors import Unprocessable

PAGE = 100
TITLES = {"email": "E-mail", "slack": "Slack", "discord": "Discord", "teams": "Microsoft Teams",
          "telegram": "Telegram", "matrix": "Matrix", "ntfy": "ntfy"}
LABELS = {"to": "Addresses (comma-separated)", "url": "Incoming webhook URL",
          "bot_token": "Bot token", "chat_id": "Chat id or @channel",
          "api_url": "Bot API server", "homeserver": "Homeserver URL",
          "room_id": "Room id or alias", "access_token": "Access token", "server": "Server",
          "topic": "Topic", "token": "Access token (if the topic needs one)"}


def _forms():
    """Per type: its title and fields (name, label, required, secret, default)."""
    return [(kind, TITLES[kind], [
        (name, LABELS[name], f.required, bool(f.metadata.get("secret")),
         f.load_default if isinstance(f.load_default, str) else "")
        for name, f in schema().fields.items()]) for kind, schema in channel_types.SCHEMAS.items()]


def _typed_settings(kind):
    """The form's settings for `kind`: blank ones left out (their defaults apply)."""
    given = {}
    for name in channel_types.SCHEMAS[kind]().fields:
        value = request.form.get(name, "").strip()
        if value:
            given[name] = [a.strip() for a in value.split(",") if a.strip()] \
                if name == "to" else value
    return given


def _beside_fields(err):
    """A service's 422 naming settings or events, said beside those fields."""
    named = (err.extra.get("details") or {}).get("json") or {}
    fields = {}
    for field, words in named.items():
        if field == "settings" and isinstance(words, dict):
            fields.update({k: form_errors.said(v if isinstance(v, list) else [str(v)])
                           for k, v in words.items()})
        else:
            fields[field] = form_errors.said(words if isinstance(words, list) else [str(words)])
    return FormInvalid(err.message, fields=fields or {"type": err.message})


@blp.get("/channels")
def channels_page():
    listed = svc.list_channels(actor(), limit=PAGE, offset=0)["items"]
    return render("channels.html", channels=listed, titles=TITLES, forms=_forms(),
                  events=webhooks.SUBSCRIBABLE, states=webhooks.delivery_states(listed),
                  smtp=mail.configured(berth().settings))


@blp.post("/channels/new/<any(" + ",".join(channel_types.TYPES) + "):kind>")
def create_channel(kind):
    svc.count_mutation(actor(), berth().limiter)
    body = load(NotificationChannelCreateSchema(), {
        "type": kind, "settings": _typed_settings(kind), "events": request.form.getlist("events"),
        "description": request.form.get("description", "").strip()})
    try:
        channel = svc.create_channel(actor(), berth(), **body)
    except Unprocessable as err:
        raise _beside_fields(err) from None
    return redirect(url_for("console.channel", channel_id=channel.id, done="created"), 303)


@blp.get("/channels/<uuid:channel_id>")
def channel(channel_id, code=200, **shown):
    found = svc.get_channel(actor(), channel_id)
    return render("channel.html", code, channel=found, title=TITLES[found.channel],
                  state=webhooks.delivery_states([found])[found.id],
                  deliveries=svc.deliveries(actor(), channel_id), **shown)


@blp.post("/channels/<uuid:channel_id>/test")
def test_channel(channel_id):
    """A test message sent now; how it went is shown on the channel's page."""
    svc.count_mutation(actor(), berth().limiter)
    return channel(channel_id, tested=svc.test_channel(actor(), berth(), channel_id))


@blp.post("/channels/<uuid:channel_id>/<any(pause,resume,delete):op>")
def change_channel(channel_id, op):
    found = svc.get_channel(actor(), channel_id)
    if op == "delete" and (asked := confirm(
            "delete channel", f"Delete the {TITLES[found.channel]} channel to {found.url}?")):
        return asked
    svc.count_mutation(actor(), berth().limiter)
    if op == "delete":
        svc.delete_channel(actor(), channel_id)
        return redirect(url_for("console.channels_page"), 303)
    svc.update_channel(actor(), berth(), channel_id, {"is_active": op == "resume"})
    return redirect(url_for("console.channel", channel_id=channel_id, done=op + "d"), 303)
