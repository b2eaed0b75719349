"""`berthctl channels`: notification channels (e-mail, Slack, Discord, Teams,
Telegram, Matrix, ntfy), their test message and delivery log."""


import click

from berthctl.commands import ID, read_secret
from berthctl.errors import CliError
from berthctl.output import echo, emit

TYPES = ("email", "slack", "discord", "teams", "telegram", "matrix", "ntfy")
# Each type's secret setting, as the control plane's channel types declare it (berthctl
# may not import them). A secret is read from stdin or SECRET_ENV, never from argv,
# where shell history and `ps` would keep it.
SECRETS = {"slack": "url", "discord": "url", "teams": "url", "telegram": "bot_token",
           "matrix": "access_token", "ntfy": "token"}
OPTIONAL_SECRETS = {"ntfy"}  # read only with --secret
SECRET_ENV = "BERTH_CHANNEL_SECRET"
LISTS = ("to",)  # e-mail's addresses: each --set adds one
PAGE = 100  # the largest offset page (and an organization's most channels)

COLUMNS = [("ID", "id"), ("TYPE", "type"), ("DESTINATION", "destination"),
           ("EVENTS", lambda c: ",".join(c["events"]) if len(c["events"]) <= 2
            else f"{len(c['events'])} events"),
           ("ACTIVE", "is_active"), ("FAILURES", "failure_count")]
DELIVERY_COLUMNS = [("ID", "id"), ("EVENT", "event"), ("STATUS", "status"),
                    ("ATTEMPTS", "attempt_count"), ("HTTP", "response_status"),
                    ("MS", "duration_ms"), ("CREATED", "created_at"), ("ERROR", "error_reason")]

set_option = click.option("--set", "pairs", metavar="KEY=VALUE", multiple=True,
                          help="A setting that is not secret (repeatable; `to` of e-mail "
                               "once per address).")
description_option = click.option("--description", help="Free text, up to 500 characters.")


def events_option(required):
    return click.option("--event", "events", metavar="NAME", multiple=True, required=required,
                        help="An event to deliver, e.g. server.unreachable (repeatable)"
                             + ("." if required else "; replaces the list."))


@click.group()
def channels():
    """Notification channels: events sent to e-mail, Slack, Discord, Teams, Telegram,
    Matrix or ntfy."""


@channels.command("list")
@click.pass_obj
def list_(state):
    """The notification channels the key can see, oldest first."""
    rows, offset = [], 0
    while True:
        page = state.client.get("/notification-channels", limit=PAGE, offset=offset)
        rows.extend(page["items"])
        offset += len(page["items"])
        if not page["has_more"] or not page["items"]:
            break
    emit(state, rows, COLUMNS)


@channels.command()
@click.argument("channel_id", type=ID)
@click.pass_obj
def show(state, channel_id):
    """A channel (its secret settings are never shown)."""
    emit(state, state.client.get(f"/notification-channels/{channel_id}"))


@channels.command()
@click.argument("channel_type", metavar="TYPE", type=click.Choice(TYPES))
@events_option(required=True)
@description_option
@click.option("--project", "project_id", metavar="ID", type=ID, help="Only this project's "
              "events (default: the organization's, or a project key's own project).")
@set_option
@click.option("--secret", "with_secret", is_flag=True, help="ntfy: read an access token "
              "too (the other types with a secret always read it).")
@click.option("--disabled", is_flag=True, help="Create it paused.")
@click.pass_obj
def create(state, channel_type, events, description, project_id, pairs, with_secret,
           disabled):
    """Create a channel of TYPE. Its secret (the chat's webhook `url`, telegram's
    `bot_token`, matrix's `access_token`, ntfy's `token` with --secret) comes from
    BERTH_CHANNEL_SECRET, else from stdin: a hidden prompt on a terminal, otherwise
    its first line."""
    settings = _settings(pairs)
    name = SECRETS.get(channel_type)
    if name and (with_secret or channel_type not in OPTIONAL_SECRETS):
        settings[name] = read_secret(f"{channel_type} {name}", SECRET_ENV)
    elif with_secret:
        raise click.UsageError(f"{channel_type} channels have no secret setting.")
    body = {"type": channel_type, "settings": settings, "events": list(events),
            "description": description, "project_id": project_id,
            "is_active": False if disabled else None}
    emit(state, state.client.post("/notification-channels",
                                  {k: v for k, v in body.items() if v is not None}))


@channels.command()
@click.argument("channel_id", type=ID)
@events_option(required=False)
@description_option
@click.option("--enable/--disable", "is_active", default=None, help="Resume (failures back "
              "to 0) or pause the channel.")
@set_option
@click.option("--secret", "with_secret", is_flag=True, help="Replace the secret setting: "
              "read as create reads it.")
@click.pass_obj
def update(state, channel_id, events, description, is_active, pairs, with_secret):
    """Change a channel; what is not given stays. Settings are merged over the
    stored ones (--event replaces the list of events)."""
    client = state.client
    body = {"events": list(events) or None, "description": description,
            "is_active": is_active, "settings": _settings(pairs) or None}
    body = {k: v for k, v in body.items() if v is not None}
    if with_secret:
        kind = client.get(f"/notification-channels/{channel_id}")["type"]
        if kind not in SECRETS:
            raise click.UsageError(f"{kind} channels have no secret setting.")
        body.setdefault("settings", {})[SECRETS[kind]] = read_secret(
            f"{kind} {SECRETS[kind]}", SECRET_ENV)
    if not body:
        raise click.UsageError("Nothing to change: give --event, --description, --enable, "
                               "--disable, --set or --secret.")
    emit(state, client.request("PATCH", f"/notification-channels/{channel_id}", body=body))


@channels.command()
@click.argument("channel_id", type=ID)
@click.pass_obj
def delete(state, channel_id):
    """Delete a channel and its delivery log."""
    state.client.request("DELETE", f"/notification-channels/{channel_id}")
    echo(f"Notification channel {channel_id} deleted.", err=True)


@channels.command("test")
@click.argument("channel_id", type=ID)
@click.pass_obj
def send_test(state, channel_id):
    """Send a test message now; exit 1 when it fails, with the reason."""
    result = state.client.post(f"/notification-channels/{channel_id}/test")
    emit(state, result)
    if not result["success"]:
        raise CliError(f"The test message failed: {result.get('message') or 'no reason given'}")


@channels.command()
@click.argument("channel_id", type=ID)
@click.pass_obj
def deliveries(state, channel_id):
    """A channel's 50 most recent deliveries, newest first."""
    emit(state, state.client.get(f"/notification-channels/{channel_id}/deliveries"),
         DELIVERY_COLUMNS)


def _settings(pairs):
    """`--set KEY=VALUE`s as settings; a secret's name is refused (it would be in argv)."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            # Not echoed: a value pasted without its key may be a secret.
            raise click.BadParameter("takes KEY=VALUE.", param_hint="--set")
        if key in SECRETS.values():
            # The value is not echoed: it may be the secret itself.
            raise click.UsageError(f"--set {key}=… refused: `{key}` is a secret setting, "
                                   f"read from stdin or {SECRET_ENV}, never from the "
                                   "command line.")
        if key in LISTS:
            settings.setdefault(key, []).append(value)
        elif key in settings:
            raise click.BadParameter(f"`{key}` given twice.", param_hint="--set")
        else:
            settings[key] = value
    return settings


COMMANDS = [channels]
