"""l2m.config.loader."""
