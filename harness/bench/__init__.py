"""The benchmarks: one module a family of figures, each measured against a baseline in the same run.

The commands `bench`, `bench-overturns` and `bench-ray` (harness/commands/) read their flags and call
``suite``, ``overturns`` and ``on_ray``; docs/benchmark.md holds the figures measured.
"""
