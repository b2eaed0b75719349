"""The services' way to the agents (`agent_link.AgentLink`): the gRPC gateway
holding one stream per resident agent (`server`, with `messages`, what crosses it),
its Redis relay between processes (`relay`), and the link to servers reached over
SSH (`ssh`, with `ssh_sessions`, `ssh_commands`, `ssh_checks`, `ssh_install`)."""
