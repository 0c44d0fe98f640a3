"""The Postgres ledger (the spec's ``[state_store]``): batch rows, pipelines and their
checkpoint generations, dead letters, window standings, the run lock. Driver side only;
not Spark's state store, which keeps operator state in the checkpoint."""
