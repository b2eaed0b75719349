"""Accounts: organizations, users, API keys and what a key can see, and the web
console's sign-in (passwords, TOTP, sessions)."""
