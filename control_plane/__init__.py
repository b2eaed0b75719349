"""Berth control plane: REST APIs, agent gateway, scheduler and admin CLI."""

__version__ = "0.2.0"
