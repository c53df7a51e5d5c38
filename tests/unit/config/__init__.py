"""Unit tests of test_config.py."""
