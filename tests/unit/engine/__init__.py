"""Unit tests of test_admission.py."""
