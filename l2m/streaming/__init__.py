"""l2m.streaming.job."""
