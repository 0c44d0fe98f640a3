"""Embedded defaults for the demo, tests and benchmark: a broker and sample data."""
