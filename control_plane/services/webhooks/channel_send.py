"""Sending one event to a notification channel: its sealed settings read, the
message made in its type's format, and sent by e-mail (mail.py) or by the
SSRF-safe HTTPS sender (net.py). Never raises; returns a SendResult."""

import json

from control_plane.infra import secretbox
from control_plane.services.webhooks import channel_types, mail, net

SECRET_PURPOSE = "channel-settings"


def seal(secrets):
    return secretbox.seal(json.dumps(secrets, sort_keys=True), SECRET_PURPOSE)


def secrets_of(channel):
    """The channel's secret settings (a copy), or None when they cannot be read
    (sealed under another CP_SECRET_KEY): setting them again repairs that."""
    raw = secretbox.unseal_cached(channel.secret_encrypted, SECRET_PURPOSE)
    return None if raw is None else json.loads(raw)


def send(channel, envelope, settings, timeout, txn_id):
    """`envelope` (payloads.envelope) to `channel`; `txn_id` names this delivery
    (a Matrix transaction: its retries are one message)."""
    secrets = secrets_of(channel)
    if secrets is None:
        return net.failed("the channel's secret settings cannot be read; set them again")
    options = channel.options or {}
    if channel.channel == "email":
        return mail.send(mail.message(envelope, options["to"], settings), settings, timeout)
    req = channel_types.request(channel.channel, options, secrets, envelope, txn_id)
    return net.post(req.url, req.body, req.headers, method=req.method, timeout=timeout,
                    allow_private=settings["WEBHOOK_ALLOW_PRIVATE"],
                    ca_bundle=settings.get("WEBHOOK_CA_BUNDLE"))
