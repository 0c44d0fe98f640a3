"""What a window computes on Spark's arbitrary-state API: the event frame a group's
state holds (``frame``) and the aggregators over its windows (``aggregators``). The
window families that hold that state are ``flow_jobs.windows``."""
