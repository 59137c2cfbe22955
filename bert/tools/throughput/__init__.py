"""Training throughput of this project's paths against HuggingFace (bench.py): the run's
settings, the workload, the variants timed, the meters and the profile."""
