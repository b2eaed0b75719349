"""Berth agent (`berth-agent`): runs on each customer server, resident (`daemon`,
one stream to the gateway) or called over SSH (`remote`); the commands and live
requests it answers (`commands`, `live`), its own upgrades (`upgrade`, `rollback`),
and a package for each thing it does: deploy, backups, proxy, metrics."""

__version__ = "0.2.0"
