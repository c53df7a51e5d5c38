"""l2m.dev."""
