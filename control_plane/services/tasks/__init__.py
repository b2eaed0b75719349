"""The task engine, imported one way: `queue` (durable agent commands) <- `engine`
(the one `start`, the agent's acknowledgements and results, the one `settle`) <-
`reaper` (the scheduler's time limits); `kinds` is the registry each domain adds
its kinds to. It imports no domain: the domains import it."""
