"""Registers the ``dedup`` operator (``[[transform.dedup]]``) with its compile step."""

from flow_jobs.dedup.compile import compile_dedup
from flow_jobs.operators.registry import register_operator
from flow_jobs.spec.dedup import DedupSpec

register_operator("dedup", DedupSpec, compile_dedup)
