"""Nexmark: an event generator of our own (``generator``) and the queries flow-jobs
expresses, as SQL pipeline files (``queries/``)."""
