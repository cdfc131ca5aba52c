"""Runs: the run store and its records, the run identity, torchrun ranks, the evaluate loop, quality control and
scoring, and the run objects the Python API returns (`results`)."""
