"""Unit tests of test_deliver_accounts.py."""
