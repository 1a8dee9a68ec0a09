"""The run path: one run start to finish (pipeline), its server process (launcher), the
sanity probe, the samplers (/metrics, NVML) and GPU queries."""
