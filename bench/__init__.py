"""Benchmark harness (not a test): `make bench` or `python -m bench.run --help`."""
