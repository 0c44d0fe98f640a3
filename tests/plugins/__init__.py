"""Plug-ins written in the tests only: each fills an extension point of
``flow_jobs.plugins`` without a line of engine code changed for it."""
