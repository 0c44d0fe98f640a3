"""Nexmark benchmark support: a deterministic event generator (``bench.nexmark.generator``)."""
