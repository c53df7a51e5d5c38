"""l2m.batch."""
