"""The agent gateway (server.py) and its Redis relay for scale-out (relay.py)."""
