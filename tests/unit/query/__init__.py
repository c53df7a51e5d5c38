"""Unit tests of test_query.py."""
