"""An environment's settings: `access` (which environment a key, user or operator
may touch, and the writer of its own fields), `configuration` and `config_rules`
(variables, ERP options, PostgreSQL settings and their allow-lists), `domains`
and `dns_check` (custom domains proved by DNS), `routes` (the host names each
server's proxy routes to it)."""
