"""Registers the window over the sources (``"window"``, ``flow_jobs.plan.windowed``),
imported on first use (``flow_jobs.lazy.on_call``)."""

from flow_jobs.lazy import on_call
from flow_jobs.plan.pipelines import register_pipeline

register_pipeline("window", on_call("flow_jobs.plan.windowed:compile_windowed"))
