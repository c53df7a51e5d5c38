"""l2m.runtime."""
