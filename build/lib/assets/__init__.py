"""Dagster assets built from pipeline specs (thin: they call flow_jobs)."""
