"""The environments on this server and their containers:

- `environments`: `Environments`, which deploys (network, PostgreSQL, the
  add-ons checked out with git, the ERP), starts, stops, restarts and destroys
  an environment's containers, all found by their `berth.environment_id` label;
- `runtime_logs`: the last lines a container printed (the `runtime_logs`
  live request);
- `commands`: the deploy, start, stop, restart, destroy and routes commands
  (registered in `agent.commands`), which also keep the server's proxy routed.

The docker-py client is handed in: the daemon's `Agent.docker()`, made when a
command or a request first needs the engine."""
