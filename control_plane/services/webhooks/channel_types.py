"""Notification channels' types: the settings each takes (and which of them are
secret), where it sends, and what it sends for an event, in its service's own
format.

- `email`: to the addresses in `to`, through the control plane's SMTP server (mail.py).
- `slack`, `discord`, `teams`: the chat's incoming-webhook `url` (secret: the URL is
  the credential), in the `blocks`, `embed` and `cards` layouts of payloads.py.
- `telegram`: the Bot API's sendMessage to `chat_id`, with the bot's token.
- `matrix`: a message in `room_id`, PUT with the delivery's id as the transaction
  id, so the homeserver keeps one message however many times a delivery is retried.
- `ntfy`: a JSON publish to `topic` on `server`, with an optional access token.
"""

import dataclasses
import html
import urllib.parse

import marshmallow as ma

from control_plane.services.webhooks import payloads

SECRET = {"secret": True}  # a field's metadata: sealed, never shown again
URL_FIELDS = ("url", "api_url", "homeserver", "server")  # checked as webhook URLs are


def _text(required=True, **kwargs):
    return ma.fields.String(required=required, **kwargs)


class Email(ma.Schema):
    to = ma.fields.List(ma.fields.Email(validate=ma.validate.Length(max=254)), required=True,
                        validate=ma.validate.Length(1, 10),
                        metadata={"description": "1 to 10 addresses."})


class Chat(ma.Schema):
    url = _text(validate=ma.validate.Length(1, 2048), metadata={
        **SECRET, "description": "The incoming webhook's https URL (secret)."})


class Telegram(ma.Schema):
    bot_token = _text(validate=ma.validate.Regexp(
        r"^[0-9]{1,20}:[A-Za-z0-9_-]{20,100}$", error="Not a bot token (digits:letters)."),
        metadata={**SECRET, "description": "The bot's token from BotFather (secret)."})
    chat_id = _text(validate=ma.validate.Regexp(
        r"^(-?[0-9]{1,20}|@[A-Za-z][A-Za-z0-9_]{4,31})$",
        error="A chat id (digits, may start with -) or a public channel's @name."))
    api_url = _text(required=False, load_default="https://api.telegram.org",
                    validate=ma.validate.Length(1, 512),
                    metadata={"description": "A Bot API server; default Telegram's."})


class Matrix(ma.Schema):
    homeserver = _text(validate=ma.validate.Length(1, 512),
                       metadata={"description": "The homeserver's https URL."})
    # A room id, not an alias: sending names the room (an alias would need a lookup).
    room_id = _text(validate=ma.validate.Regexp(
        r"^![^:\s]{1,255}:\S{1,255}$", error="A room id (!id:server, in the room's settings)."))
    access_token = _text(validate=ma.validate.Length(1, 1024),
                         metadata={**SECRET,
                                   "description": "The sending account's token (secret)."})


class Ntfy(ma.Schema):
    server = _text(required=False, load_default="https://ntfy.sh",
                   validate=ma.validate.Length(1, 512))
    topic = _text(validate=ma.validate.Regexp(r"^[-_A-Za-z0-9]{1,64}$",
                                             error="1 to 64 letters, digits, - or _."))
    token = _text(required=False, load_default=None, allow_none=True,
                  validate=ma.validate.Length(1, 1024),
                  metadata={**SECRET, "description": "An access token, if the topic needs one "
                                                     "(secret)."})


SCHEMAS = {"email": Email, "slack": Chat, "discord": Chat, "teams": Chat,
           "telegram": Telegram, "matrix": Matrix, "ntfy": Ntfy}
TYPES = tuple(SCHEMAS)
CHAT_LAYOUTS = {"slack": payloads.blocks, "discord": payloads.embed, "teams": payloads.cards}


def secret_names(kind):
    return {name for name, f in SCHEMAS[kind]().fields.items() if f.metadata.get("secret")}


def split(kind, settings):
    """(options, secrets): the settings shown again, and those sealed."""
    hidden = secret_names(kind)
    return ({k: v for k, v in settings.items() if k not in hidden},
            {k: v for k, v in settings.items() if k in hidden})


def destination(kind, options, secrets):
    """Where the channel sends, without its secrets: the subscription's `url`."""
    if kind == "email":
        shown = "mailto:" + ",".join(options["to"])
        return shown if len(shown) <= 2048 else (  # the column's length
            f"mailto:{options['to'][0]} and {len(options['to']) - 1} more")
    if kind in CHAT_LAYOUTS:
        parts = urllib.parse.urlsplit(secrets["url"])
        return f"{parts.scheme}://{parts.netloc}/…"
    if kind == "telegram":
        return options["api_url"].rstrip("/")
    if kind == "matrix":
        return options["homeserver"].rstrip("/")
    return f"{options['server'].rstrip('/')}/{options['topic']}"


@dataclasses.dataclass(frozen=True)
class Request:
    url: str
    body: bytes
    headers: dict
    method: str = "POST"


def lines(envelope):
    """The message as plain lines: summary, details, then the event's id and time."""
    return ([payloads.summary(envelope)]
            + [f"{label}: {text}" for label, text in payloads.facts(envelope)]
            + [f"Event {envelope['event_id']} · {envelope['timestamp']}"])


FACT_CHARS = 300  # of one detail in a message (an error message may be long)


def _html(envelope):
    """Cut in its text, never its markup: ten details of FACT_CHARS stay within a
    Telegram message."""
    facts = "".join(f"<br><b>{html.escape(label)}</b>: {html.escape(text[:FACT_CHARS])}"
                    for label, text in payloads.facts(envelope))
    return (f"<b>{html.escape(envelope['event'])}</b>\n{html.escape(payloads.summary(envelope))}"
            f"{facts}<br><i>Event {html.escape(envelope['event_id'])} · "
            f"{html.escape(envelope['timestamp'])}</i>")


def request(kind, options, secrets, envelope, txn_id):
    """The HTTP request a chat channel sends for `envelope`."""
    json_headers = {"Content-Type": "application/json", "User-Agent": payloads.USER_AGENT}
    if kind in CHAT_LAYOUTS:
        return Request(secrets["url"], payloads.dump(CHAT_LAYOUTS[kind](envelope)), json_headers)
    if kind == "telegram":
        text = _html(envelope).replace("<br>", "\n")
        return Request(
            f"{options['api_url'].rstrip('/')}/bot{secrets['bot_token']}/sendMessage",
            payloads.dump({"chat_id": options["chat_id"], "text": text, "parse_mode": "HTML",
                           "disable_web_page_preview": True}), json_headers)
    if kind == "matrix":
        room = urllib.parse.quote(options["room_id"], safe="")
        return Request(
            f"{options['homeserver'].rstrip('/')}/_matrix/client/v3/rooms/{room}/send/"
            f"m.room.message/berth-{txn_id}",
            payloads.dump({"msgtype": "m.notice", "body": "\n".join([envelope["event"],
                                                                      *lines(envelope)]),
                           "format": "org.matrix.custom.html",
                           "formatted_body": _html(envelope).replace("\n", "<br>")}),
            {**json_headers, "Authorization": f"Bearer {secrets['access_token']}"}, "PUT")
    tone = payloads.tone(envelope)
    headers = dict(json_headers)
    if secrets.get("token"):
        headers["Authorization"] = f"Bearer {secrets['token']}"
    return Request(options["server"].rstrip("/"), payloads.dump({
        "topic": options["topic"], "title": payloads.title(envelope),
        "message": "\n".join(lines(envelope)),
        "priority": 4 if tone == "failure" else 3,
        "tags": {"failure": ["rotating_light"], "success": ["white_check_mark"]}.get(tone, [])}),
        headers)
