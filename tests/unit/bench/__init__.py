"""Unit tests of test_bench_options.py."""
