"""l2m.rules.loader."""
