"""An environment and what is done to it: `kinds` (the deploy task kinds and the
command they carry), `environments` (the public API's environments and their
actions), `operations` (the /api/v1 deployment operations), `actions` (act,
retry, rollback, cancel, destroy, for both), `config_change` (a changed
configuration, redeployed). Tasks start and settle in services/tasks."""
