"""l2m.query.compiler."""
