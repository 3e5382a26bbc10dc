"""desired."""
