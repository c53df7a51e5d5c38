"""Unit tests of test_remotewrite.py."""
