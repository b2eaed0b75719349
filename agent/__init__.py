"""Berth agent: runs on each customer server."""

__version__ = "0.2.0"
