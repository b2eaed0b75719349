"""The services' way to the agents (`agent_link.AgentLink`): the gRPC gateway
holding one stream per resident agent (`server`, with `messages`, what crosses it),
its Redis relay between processes (`relay`), the link to servers reached over SSH
(the `ssh` package), and what an agent reports, read once for both (`reports`)."""
