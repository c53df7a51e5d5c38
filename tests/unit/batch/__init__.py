"""Unit tests of test_backfill_finals.py."""
