"""The protocol between the control plane's gateway and the agents: the only code
both sides import. It holds the stubs generated from the wire contract (`v1`; the
source is proto/protocol/v1/agent.proto), the kinds of work that cross it (`kinds`),
the codes an agent answers with (`errors`), the states it reports (`states`), how
payloads cross in each protocol revision (`wire`) and messages framed in a byte
stream for SSH (`frames`). It imports nothing of either side."""
