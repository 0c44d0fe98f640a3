"""Plug-ins written outside the engine, registered from the test tree (``flow_jobs.plugins``)."""
