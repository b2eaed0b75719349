"""Support: tickets and release notes."""
