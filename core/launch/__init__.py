"""What a user asks for before anything runs: the launch form's rules, presets, what this
host can run, the explain plan, and the one way runs and experiments are queued."""
