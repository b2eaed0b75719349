"""Accounts: organizations, users, API keys and what a key can see."""
