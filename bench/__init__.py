"""Benchmarks (GitHub issue #7): see bench/README.md."""
