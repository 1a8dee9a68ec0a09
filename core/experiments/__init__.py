"""Experiment design and storage: arms x trials, knob grids, experiment.json records.
Nothing here measures or queues: analysis reads these records, launch queues them."""
