"""Benchmarks for rg: each is ``python -m bench.NAME [--quick] [--out PATH]`` (see README.md)."""
