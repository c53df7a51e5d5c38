"""Unit tests of test_values.py."""
