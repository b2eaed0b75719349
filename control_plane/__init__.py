"""Berth control plane: REST APIs, web console, agent gateway, scheduler and admin CLI.
What each package holds: README.md, "Architecture"."""

__version__ = "0.2.0"
