"""The command groups of berthctl, one module each."""
