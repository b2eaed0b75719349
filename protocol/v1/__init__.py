"""Version 1 of the protocol: the stubs generated (`make proto`) from its source,
proto/protocol/v1/agent.proto (package `berth.agent.v1`)."""
