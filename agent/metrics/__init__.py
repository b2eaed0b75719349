"""What the agent measures on its server, for heartbeats, live requests and the
periodic disk report:

- `host`: the host's CPU, memory, disk and network (`HostSampler`, every
  heartbeat and the `host_metrics` request), and `disk_path`, the filesystem
  those disk figures describe;
- `containers`: CPU and memory of an environment's containers
  (`ContainerMetrics`, the `container_metrics` request), from cgroup files;
- `disk` and `disk_walk`: each environment's database, filestore and add-ons
  sizes (`DiskMeter`, run by the daemon's disk thread, sent as `DiskReport`);
- `engine`: a minimal engine client over the engine's socket, without docker-py,
  for the questions periodic work asks (how many containers; an exec's output).

The daemon imports them when first needed: its samplers (`Agent.host_sampler()`,
`container_sampler()`) serve heartbeats and agent.live's requests, its disk
thread runs `DiskMeter`; `agent.facts` reads `disk_path`. They import none of
the agent's other packages (backups, proxy, deploy), and a heartbeat needs only
`host` and `engine`: no docker-py."""
