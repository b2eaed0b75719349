"""The organization's webhooks and their deliveries, API keys, automation rules
and audit log."""

import uuid

from flask import current_app, redirect, request, url_for

from control_plane.api.public.audit import AuditArgs
from control_plane.api.public.webhooks import WebhookCreateSchema, WebhookUpdateSchema
from control_plane.console import (
    FormInvalid,
    actor,
    berth,
    blp,
    confirm,
    load,
    render,
)
from control_plane.services import audit
from control_plane.services.accounts import keys, sessions
from control_plane.services.projects import projects
from control_plane.services.webhooks import subscriptions as webhooks

PAGE = 100


# --- webhooks ---------------------------------------------------------------------------

@blp.get("/webhooks")
def webhooks_page():
    listed = webhooks.list_webhooks(actor(), limit=PAGE, offset=0)["items"]
    return render("webhooks.html", webhooks=listed, events=webhooks.SUBSCRIBABLE,
                  deliveries=webhooks.delivery_states(listed))


@blp.post("/webhooks")
def create_webhook():
    webhooks.count_mutation(actor(), berth().limiter)
    body = load(WebhookCreateSchema(), {
        "url": request.form.get("url", "").strip(), "events": request.form.getlist("events"),
        "description": request.form.get("description", "").strip()})
    webhook, secret = webhooks.create_webhook(actor(), berth(), **body)
    # The secret is shown on this answer only, never again.
    return render("webhook_created.html", 201, webhook=webhook, secret=secret)


@blp.post("/webhooks/<uuid:webhook_id>/<any(pause,resume,delete):op>")
def change_webhook(webhook_id, op):
    if op == "delete" and (asked := confirm(
            "delete webhook", f"Delete the webhook to {webhooks.get_webhook(actor(), webhook_id).url}?")):
        return asked
    webhooks.count_mutation(actor(), berth().limiter)
    if op == "delete":
        webhooks.delete_webhook(actor(), webhook_id)
    else:
        webhooks.update_webhook(actor(), berth(), webhook_id,
                                {"is_active": op == "resume"})
    return redirect(url_for("console.webhooks_page"), 303)


@blp.get("/webhooks/<uuid:webhook_id>")
def webhook(webhook_id, code=200, **shown):
    hook = webhooks.get_webhook(actor(), webhook_id)
    return render("webhook.html", code, webhook=hook, events=webhooks.SUBSCRIBABLE,
                  formats=webhooks.FORMATS, state=webhooks.delivery_states([hook])[hook.id],
                  deliveries=webhooks.deliveries(actor(), webhook_id), **shown)


@blp.post("/webhooks/<uuid:webhook_id>/edit")
def edit_webhook(webhook_id):
    webhooks.count_mutation(actor(), berth().limiter)
    body = load(WebhookUpdateSchema(), {
        "url": request.form.get("url", "").strip(), "events": request.form.getlist("events"),
        "description": request.form.get("description", "").strip(),
        "format": request.form.get("format", "raw")})
    webhooks.update_webhook(actor(), berth(), webhook_id, body)
    return redirect(url_for("console.webhook", webhook_id=webhook_id, done="saved"), 303)


@blp.post("/webhooks/<uuid:webhook_id>/test")
def test_webhook(webhook_id):
    """A ping sent now; its answer is shown on the webhook's page."""
    webhooks.count_mutation(actor(), berth().limiter)
    return webhook(webhook_id, tested=webhooks.ping(actor(), berth(), webhook_id))


@blp.get("/webhooks/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/body")
def delivery_body(webhook_id, delivery_id):
    """The body a delivery sends (shown when its row is opened)."""
    hook = webhooks.get_webhook(actor(), webhook_id)
    return render("_delivery_body.html", body=webhooks.sent_body(hook, delivery_id))


@blp.post("/webhooks/<uuid:webhook_id>/deliveries/<uuid:delivery_id>/redeliver")
def redeliver(webhook_id, delivery_id):
    webhooks.count_mutation(actor(), berth().limiter)
    webhooks.redeliver(actor(), webhook_id, delivery_id)
    return redirect(url_for("console.webhook", webhook_id=webhook_id, done="redelivered"), 303)


# --- API keys ----------------------------------------------------------------------------

@blp.get("/keys")
def keys_page():
    listed, _ = projects.list_projects(actor(), limit=PAGE, cursor=None)
    return render("keys.html", keys=[{"key": k, "status": keys.status_of(k)}
                                     for k in keys.list_keys(actor().organization_id)],
                  projects=listed)


@blp.post("/keys")
def create_key():
    name = request.form.get("name", "").strip()
    if not 1 <= len(name) <= 255:
        raise FormInvalid("name: 1 to 255 characters.",
                          fields={"name": "Give the key a name of 1 to 255 characters."})
    try:
        project_id = uuid.UUID(request.form["project_id"]) if request.form.get(
            "project_id") else None
    except ValueError:
        said = "Choose the whole organization or one of its projects."
        raise FormInvalid(said, fields={"project_id": said}) from None
    key, raw = keys.create_key(
        actor().organization_id, name, request.form.get("key_type", "read_only"),
        "project" if project_id else "organization", project_id=project_id,
        owner_id=actor().user_id)
    # The whole key is in this answer only, never again.
    return render("key_created.html", 201, key=key, raw=raw,
                  public_url=current_app.config["PUBLIC_URL"].rstrip("/"))


@blp.post("/keys/<string:public_id>/revoke")
def revoke_key(public_id):
    key = sessions.own_key(actor(), public_id)
    if asked := confirm("revoke key", f"Revoke the key {key.name}?", name=key.name):
        return asked
    keys.revoke_key(key.public_id)
    return redirect(url_for("console.keys_page"), 303)


# --- audit log ------------------------------------------------------------------------------

@blp.get("/audit")
def audit_page():
    given = {k: v for k, v in request.args.items() if v.strip()}
    args = load(AuditArgs(), {"limit": 50, **given})
    shown = {k: v for k, v in given.items() if k != "cursor"}
    rows, meta = audit.list_events(actor(), since=args.pop("from_", None),
                                   until=args.pop("to", None), **args)
    return render("audit.html", events=rows, meta=meta, filters=shown,
                  actions=audit.actions(actor()))
