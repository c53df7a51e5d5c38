"""Unit tests of test_rules.py."""
