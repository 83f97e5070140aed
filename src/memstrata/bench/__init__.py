"""Benchmark harnesses behind ``memstrata bench``; the runners live in ``benchmarks/``."""
