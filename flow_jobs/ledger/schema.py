"""The state store's tables (``flow_jobs.ledger.store``) and their migrations: each
entry runs once, in order, in one transaction with its version row."""

from __future__ import annotations

import re

SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
DEFAULT_SCHEMA = "flow_jobs"

#: Each entry runs once, in order, in one transaction with its version row.
MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE {s}.pipelines (
            name text PRIMARY KEY,
            state_version integer NOT NULL DEFAULT 0,
            fingerprint text,
            fingerprint_fields jsonb,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE {s}.batches (
            pipeline text NOT NULL REFERENCES {s}.pipelines (name),
            query_id text NOT NULL,
            batch_id bigint NOT NULL,
            state_version integer NOT NULL,
            start_offsets jsonb,
            end_offsets jsonb,
            max_event_times jsonb,
            source_watermarks jsonb,
            global_watermark timestamptz,
            input_rows bigint,
            output_rows bigint NOT NULL,
            late_rows bigint,
            dead_lettered_rows bigint NOT NULL DEFAULT 0,
            target_kind text NOT NULL,
            target text NOT NULL,
            target_version text,
            replayed boolean NOT NULL DEFAULT false,
            started_at timestamptz NOT NULL,
            committed_at timestamptz NOT NULL DEFAULT now(),
            compute_ms double precision,
            write_ms double precision,
            batch_ms double precision,
            PRIMARY KEY (pipeline, query_id, batch_id)
        );
        CREATE INDEX batches_recent ON {s}.batches (pipeline, committed_at DESC);
        CREATE TABLE {s}.dead_letters (
            pipeline text NOT NULL,
            source text NOT NULL,
            reason text,
            topic text NOT NULL,
            partition integer NOT NULL,
            "offset" bigint NOT NULL,
            key bytea,
            value bytea,
            kafka_timestamp timestamptz,
            batch_id bigint,
            dead_lettered_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (pipeline, source, topic, partition, "offset")
        );
        """,
    ),
    (
        2,
        # The target's natural key, as the last run compiled it (a join's depends on the
        # sources' schemas): what the natural_key_unique check groups by.
        "ALTER TABLE {s}.pipelines ADD COLUMN natural_key jsonb",
    ),
    (
        3,
        # Late rows per source, row by row (late_rows keeps the batch's total).
        "ALTER TABLE {s}.batches ADD COLUMN source_late_rows jsonb",
    ),
    (
        4,
        # A dead letter's Kafka headers, in order: names and exact value bytes.
        "ALTER TABLE {s}.dead_letters ADD COLUMN header_keys text[], "
        "ADD COLUMN header_values bytea[]",
    ),
    (
        5,
        # The time the current checkpoint generation replays from (flow-jobs reset
        # --from): its fresh checkpoint starts every source there. NULL: starting_offsets.
        "ALTER TABLE {s}.pipelines ADD COLUMN replay_from timestamptz",
    ),
    (
        6,
        # Records [[transform.dedup]] took out per source (NULL: no deduplication).
        "ALTER TABLE {s}.batches ADD COLUMN source_duplicates jsonb",
    ),
    (
        7,
        # top_n with emit = "current": every group's current row of each open window
        # (flow_jobs.top_n.standings.Standings), per checkpoint generation.
        """
        CREATE TABLE {s}.window_standings (
            pipeline text NOT NULL,
            state_version integer NOT NULL,
            window_start timestamptz NOT NULL,
            window_end timestamptz NOT NULL,
            group_key text NOT NULL,
            row bytea NOT NULL,
            PRIMARY KEY (pipeline, state_version, window_start, window_end, group_key)
        )
        """,
    ),
]
