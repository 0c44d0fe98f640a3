"""Errors a user can hit: a spec that cannot be compiled, a target that cannot be written."""

from __future__ import annotations


class PlanError(ValueError):
    """A spec that validates but cannot be compiled; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


class TargetError(RuntimeError):
    """A target the run cannot write; the message says which and what to do."""


class TargetSchemaError(TargetError):
    """An existing table's columns differ from what the pipeline writes."""


class TargetUnavailable(TargetError):
    """A table that does not exist and cannot be created where the spec says."""
