"""The load path: what is sent (prompts) and how (the load generator, its client
workers, the streaming HTTP client)."""
