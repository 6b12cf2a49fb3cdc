"""The pieces put together for an application: `create_action_jobs` (queue, scheduler and worker in one) and
`close_on_signals` (a graceful drain on SIGTERM)."""
