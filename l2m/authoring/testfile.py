"""Rule unit test files (placeholder: being written)."""
