"""Errors found while compiling a valid spec against real schemas."""

from __future__ import annotations


class PlanError(ValueError):
    """A spec that validates but cannot be compiled; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")
