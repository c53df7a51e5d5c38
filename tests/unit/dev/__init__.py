"""Unit tests of test_demo_view.py."""
