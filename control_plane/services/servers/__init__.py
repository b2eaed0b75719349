"""Servers and their agents: the records (`servers`), registration tokens
(`registration`), servers reached over SSH with their keys (`ssh`), live reads from
an agent (`monitoring`), the metric history (`history`), fleet alerts (`alerts`) and
agent upgrades (`upgrades`)."""
