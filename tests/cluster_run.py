"""A driver on the test cluster, in its own process (a JVM holds one SparkContext, and
the suite's is local): ``python -m tests.cluster_run '<json>'``.

It asks the executors where they import flow_jobs from, then materializes the pipeline
assets of the given spec files through Dagster, with the Spark resource pointed at the
cluster and the packed archive; the spec files say nothing about the cluster. Prints one
JSON line: the executors' answers and whether the run succeeded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa


def executors_python(spark, executors: int) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    """Where each executor's SQL Python worker runs from and imports flow_jobs from.

    Spark places a job's tasks where it likes: one job of a few tasks may run them all
    on one executor (seen here: the first executor to register took all four while the
    other unpacked the archive). So the probe runs until ``executors`` executors have
    answered, a bounded number of times; the test then checks every answer."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import arrow_udf

    @arrow_udf("string")
    def where(ids: pa.Array) -> pa.Array:
        import json as j
        import os as o
        import sys as s

        import flow_jobs

        seen = j.dumps({"python": s.executable, "cwd": o.getcwd(), "flow_jobs": flow_jobs.__file__})
        return pa.array([seen] * len(ids))

    seen: dict[str, dict[str, str]] = {}
    for _ in range(50):
        rows = spark.range(0, 8, 1, 8).select(where(F.col("id")).alias("w")).distinct().collect()
        for r in rows:
            answer = json.loads(r.w)
            seen[answer["cwd"]] = answer
        if len(seen) >= executors:
            break
    return list(seen.values())


def main() -> int:
    args = json.loads(sys.argv[1])
    from dagster import materialize

    from assets.asset import pipeline_asset
    from assets.resources import (
        DeltaTargetResource,
        KafkaResource,
        PostgresStateStoreResource,
        SparkResource,
    )
    from flow_jobs.runtime.session import build_spark_session
    from flow_jobs.spec import load_spec

    conf = {"spark.executor.memory": "512m", "spark.executor.cores": "1"}
    spark = build_spark_session(args["master"], conf, archive=args["archive"])
    seen = executors_python(spark, args["executors"])
    resources = {
        "spark": SparkResource(master=args["master"], archive=args["archive"], spark_config=conf),
        "kafka": KafkaResource(),
        "state_store": PostgresStateStoreResource(),
        "delta": DeltaTargetResource(),
    }
    result = materialize(
        [pipeline_asset(load_spec(Path(p)), Path(p)) for p in args["specs"]],
        resources=resources,
        raise_on_error=False,
    )
    failures = _failures(result)
    versions = {}
    for spec_path, checkpoint in args.get("replay", []):
        # a crash after the target's commit, before Spark's commit log: the last batch
        # runs again on the cluster, and must commit nothing
        from deltalake import DeltaTable

        from tests.support import drop_last_commit

        spec = load_spec(Path(spec_path))
        before = DeltaTable(spec.target.path).version()  # type: ignore[attr-defined]
        drop_last_commit(checkpoint)
        again = materialize(
            [pipeline_asset(spec, Path(spec_path))], resources=resources, raise_on_error=False
        )
        failures += _failures(again)
        after = DeltaTable(spec.target.path).version()  # type: ignore[attr-defined]
        versions[spec.name] = [before, after, again.success]
    print(
        json.dumps(
            {
                "executors": seen,
                "success": result.success,
                "failures": failures,
                "replayed": versions,
            }
        )
    )
    return 0


def _failures(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        str(e.event_specific_data.error)
        for e in result.all_events
        if e.is_failure
        and e.event_specific_data is not None
        and getattr(e.event_specific_data, "error", None) is not None
    ]


if __name__ == "__main__":
    raise SystemExit(main())
