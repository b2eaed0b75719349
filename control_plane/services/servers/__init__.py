"""Servers: their records, registration and monitoring."""
