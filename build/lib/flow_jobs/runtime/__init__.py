"""Run a compiled pipeline as a managed StreamingQuery."""
