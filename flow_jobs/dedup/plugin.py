"""Registers the ``dedup`` operator (``[[transform.dedup]]``) with its compile step,
imported on first use (``flow_jobs.lazy.on_call``)."""

from flow_jobs.dedup.spec import DedupSpec
from flow_jobs.lazy import on_call
from flow_jobs.operators.registry import register_operator

register_operator("dedup", DedupSpec, on_call("flow_jobs.dedup.compile:compile_dedup"))
