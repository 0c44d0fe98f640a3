"""What every state-API operator and aggregator builds on, and nothing above it:
a group's rows as columns (``frame``), index ranges over them and the aggregators that
fold them (``ranges``), and the one rule for an event-time timer (``timers``)."""
