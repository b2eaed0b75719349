"""Version 1 of the protocol: agent.proto and the stubs generated from it (`make proto`)."""
