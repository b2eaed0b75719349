"""The deployment lifecycle, in layers: `queue` (durable agent commands) <-
`lifecycle` (kinds, start, the agent's results, settle) <- `actions` (what a
person asks, on either API surface) and `reaper` (the scheduler's timeouts);
`access` resolves the environment an action takes."""
