"""Benchmarks; run `make bench` (see bench/README.md)."""
