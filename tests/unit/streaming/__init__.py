"""Unit tests of test_live_rules.py."""
