"""l2m.state.function."""
