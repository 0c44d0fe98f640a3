"""make bench."""
