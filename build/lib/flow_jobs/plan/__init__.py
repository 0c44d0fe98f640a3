"""Compile a spec into a streaming DataFrame: source, dead-letter tap, SQL pre-stage, window."""
