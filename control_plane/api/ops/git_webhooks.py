"""Incoming push events from Git hosts: POST /webhooks/<git_provider>,
authenticated by an HMAC signature with the project's secret."""

from flask_smorest import Blueprint

blp = Blueprint("git_webhooks", __name__, description="Incoming Git push webhooks")
