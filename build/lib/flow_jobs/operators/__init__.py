"""Window execution on Spark's arbitrary-state API (runs inside Spark's Python workers).

Window *definitions* and their compilation live in ``flow_jobs.plan``; this package is
what a ``transformWithStateInPandas`` task executes for sliding and count-based windows.
"""
