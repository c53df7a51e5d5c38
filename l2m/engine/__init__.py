"""l2m.engine."""
