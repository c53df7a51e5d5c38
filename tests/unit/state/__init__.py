"""Unit tests of test_accounts.py."""
