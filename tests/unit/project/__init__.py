"""Unit tests of test_changelog.py."""
