"""Pipeline spec: pydantic v2 models, the single source of truth for configuration.

Every config-time rule lives in the model that owns the key, so a message always names
the key and the value: one module per part of the file (``sources``, ``windows``,
``transform``, ``targets``, ``running``; shared pieces in ``base``), gathered here into
the whole file's ``PipelineSpec``, with every part importable from this module. Values
the spec reference reserves for later (``late_data = "dlq"``, ``crash_recovery =
"kafka_eos"``, ...) are part of the accepted vocabulary and rejected with "not supported
yet", so a user can tell a typo from a roadmap item.

The same models are the Python facade: ``Window``, ``Aggregation`` and ``Lookup`` are
importable from ``flow_jobs``, take callables where TOML takes import paths, and
``PipelineSpec.to_toml()`` writes the file ``load_spec`` reads back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import (
    Field,
    SecretStr,
    SerializeAsAny,
    ValidationInfo,
    field_validator,
    model_validator,
)

from flow_jobs.instants import epoch_ms
from flow_jobs.records import EVENT_TS
from flow_jobs.spec.aggregation import Aggregation
from flow_jobs.spec.base import (
    IMPORT_PATH,
    KAFKA_COLUMN,
    KAFKA_TOPIC_NAME,
    PIPELINE_NAME,
    SQL_IDENTIFIER,
    ImportPath,
    SpecModel,
    aware_instant,
    dead_letter_topic_rule,
    import_plugins,
    key_error,
    not_supported,
    resolve_import_path,
    revealed,
)
from flow_jobs.spec.columns import check_columns, check_event_time_types
from flow_jobs.spec.operators import (
    OperatorSpec,
    SourceOperator,
    check_operators,
    source_operators,
)
from flow_jobs.spec.running import (
    REFUSED_SPARK_CONF,
    REFUSED_SPARK_CONF_SAFE,
    CheckpointSpec,
    ChecksSpec,
    OrchestrationSpec,
    RuntimeSpec,
    SparkSpec,
    StateStoreSpec,
)
from flow_jobs.spec.sources import KafkaSource, StartingOffsets, StartingTimestamp
from flow_jobs.spec.stages import STAGE_SPECS
from flow_jobs.spec.targets import DeadLetterSpec, TargetSpec, deleting_kinds, validate_target
from flow_jobs.spec.transform import LookupKind, LookupSpec, TransformSpec
from flow_jobs.spec.windows import WindowSpec

__all__ = [
    "EVENT_TS",
    "IMPORT_PATH",
    "KAFKA_COLUMN",
    "KAFKA_TOPIC_NAME",
    "PIPELINE_NAME",
    "REFUSED_SPARK_CONF",
    "REFUSED_SPARK_CONF_SAFE",
    "SQL_IDENTIFIER",
    "Aggregation",
    "CheckpointSpec",
    "ChecksSpec",
    "DeadLetterSpec",
    "ImportPath",
    "KafkaSource",
    "LookupKind",
    "LookupSpec",
    "OperatorSpec",
    "OrchestrationSpec",
    "PipelineSpec",
    "RuntimeSpec",
    "SparkSpec",
    "SpecModel",
    "StartingOffsets",
    "StartingTimestamp",
    "StateStoreSpec",
    "TargetSpec",
    "TransformSpec",
    "WindowSpec",
    "aware_instant",
    "dead_letter_topic_rule",
    "epoch_ms",
    "key_error",
    "not_supported",
    "resolve_import_path",
    "revealed",
]


class PipelineSpec(SpecModel):
    """One ``pipelines/*.toml`` file."""

    #: Modules imported before the rest of the spec is read: plug-ins that register
    #: window kinds, aggregators... (``flow_jobs.plugins``).
    plugins: list[str] = Field(default_factory=list)
    name: str
    sources: list[KafkaSource] = Field(min_length=1)
    transform: TransformSpec
    #: the kind's own model (``flow_jobs.sinks``), dumped with its own keys
    target: SerializeAsAny[TargetSpec]
    dead_letter: DeadLetterSpec = Field(default_factory=DeadLetterSpec)
    state_store: StateStoreSpec = Field(default_factory=StateStoreSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    spark: SparkSpec = Field(default_factory=SparkSpec)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    checks: ChecksSpec = Field(default_factory=ChecksSpec)
    orchestration: OrchestrationSpec = Field(default_factory=OrchestrationSpec)

    @model_validator(mode="before")
    @classmethod
    def _load_plugins(cls, data: Any) -> Any:
        """Import the spec's plug-ins first: the kinds they register then validate."""
        if isinstance(data, dict):
            import_plugins(data.get("plugins"))
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not PIPELINE_NAME.match(v):
            raise ValueError(f"name = {v!r} must match [a-z0-9_-]+")
        return v

    @field_validator("sources", mode="before")
    @classmethod
    def _source_kinds(cls, v: Any) -> Any:
        for i, source in enumerate(v if isinstance(v, list) else []):
            kind = source.get("kind", "kafka") if isinstance(source, dict) else "kafka"
            if kind != "kafka":
                raise ValueError(f'sources[{i}].kind = "{kind}" is not supported; use "kafka"')
        return v

    @field_validator("target", mode="before")
    @classmethod
    def _target_kind(cls, v: Any, info: ValidationInfo) -> Any:
        return validate_target(v, info.context)  # read by its kind's sink's model

    @model_validator(mode="after")
    def _rules(self) -> PipelineSpec:
        seen: dict[str, str] = {}
        for i, s in enumerate(self.sources):
            if s.name in seen:
                raise key_error("sources", f"sources[{i}].name = {s.name!r} repeats {seen[s.name]}")
            seen[s.name] = f"sources[{i}].name"
        for i, lookup in enumerate(self.transform.lookups):
            if lookup.name in seen:
                raise key_error(
                    "transform",
                    f"lookups[{i}].name = {lookup.name!r} is also {seen[lookup.name]}: "
                    "views need distinct names",
                )
        first = self.transform.stages()[0]
        first.check_sources(self.sources, self.transform.sql)
        check_changes(self, first)
        check_operators(self)
        check_columns(self)
        check_event_time_types(self)
        kind, append_only = self.target.kind, self.target.append_only
        if self.ranks_current and append_only:
            raise key_error(
                "target.kind",
                f'kind = "{kind}" cannot take top_n with emit = "current": a row that '
                f"leaves the top N is deleted, which {append_only} cannot do; use "
                f'{deleting_kinds()}, or emit = "final"',
            )
        if getattr(first, "DELETES", False) and append_only:
            raise key_error(
                "target.kind",
                f'kind = "{kind}" cannot take {first.NOUN}: a change may delete a row, which '
                f"{append_only} cannot do; use {deleting_kinds()}",
            )
        if self.supersedes_overlapping and append_only:
            raise key_error(
                "target.kind",
                f'kind = "{kind}" cannot take {self.window.kind} windows with emit = '
                '"current": each update replaces the group\'s rows its bounds overlap (a window '
                f"grows, or two merge), which {append_only} cannot delete; use "
                f'{deleting_kinds()}, or emit = "final"',
            )
        return self

    def operators_of(self, source: str) -> list[SourceOperator]:
        """The operators a source's view runs through, in order
        (``flow_jobs.spec.operators``: its ``[[transform.dedup]]``, then its
        ``[[transform.operators]]``)."""
        return source_operators(self, source)

    def operators(self) -> list[SourceOperator]:
        """Every source's operators."""
        return source_operators(self)

    @property
    def supersedes_overlapping(self) -> bool:
        """A row replaces the group's rows it overlaps (``WindowSpec.supersedes_overlapping``)."""
        w = self.transform.window
        return w is not None and w.supersedes_overlapping

    @property
    def ranks_current(self) -> bool:
        """top_n with emit = "current": a row that leaves the top N is deleted."""
        w = self.transform.window
        return w is not None and w.top_n is not None and w.emit == "current"

    @property
    def window(self) -> WindowSpec:
        assert self.transform.window is not None, "this pipeline has no window"
        return self.transform.window

    @property
    def has_window(self) -> bool:
        return self.transform.window is not None

    def warnings(self) -> list[str]:
        """What is valid but deserves a word at start-up (and from ``validate``)."""
        out = []
        if self.has_window and self.window.reopens and self.target.append_only:
            out.append(
                'late_data = "reopen" re-emits a window each time late rows correct it, and '
                f"{self.target.append_only} keeps every record: consumers see one record per "
                f"revision (the {self.window.revision_column} column) and should keep the "
                "highest per window and group"
            )
        return out

    def starting_at(self, instant: datetime) -> PipelineSpec:
        """This spec with every source starting at ``instant`` (a fresh checkpoint of a
        generation started by ``flow-jobs reset --from``)."""
        start = StartingTimestamp(timestamp=instant)
        sources = [s.model_copy(update={"starting_offsets": start}) for s in self.sources]
        return self.model_copy(update={"sources": sources})

    def checkpoint_location(self) -> str:
        return self.checkpoint.location or f"./.flow/{self.name}/checkpoint"

    def dead_letter_path(self) -> str:
        """``[dead_letter] path``; unset, next to a target on object storage (a Delta
        target's ``<path>_dead_letters``: ``TargetSpec.table_beside``), else
        ``./.flow/<name>/dead_letters``.

        Why beside such a target: its run may be a short-lived container (a Dagster run,
        a cluster driver) whose local disk goes with it, and dead letters must outlive
        the run like the windows do; the target's bucket and credentials are the ones
        the pipeline is known to write. A local target keeps the local default."""
        if self.dead_letter.path:
            return self.dead_letter.path
        beside = self._dead_letters_beside_target()
        return beside[0] if beside else f"./.flow/{self.name}/dead_letters"

    def dead_letter_storage_options(self) -> dict[str, str]:
        """The dead-letter table's storage options, revealed: ``[dead_letter]
        storage_options``, else the target's when the table defaults to beside it."""
        if self.dead_letter.storage_options:
            return revealed(self.dead_letter.storage_options)
        beside = self._dead_letters_beside_target()
        return revealed(beside[1]) if beside else {}

    def _dead_letters_beside_target(self) -> tuple[str, dict[str, SecretStr]] | None:
        if self.dead_letter.kind != "delta" or self.dead_letter.path:
            return None
        return self.target.table_beside("_dead_letters")

    def natural_key(self) -> list[str]:
        """A windowed pipeline's natural key (a join's depends on the sources' schemas:
        its compile step finds it)."""
        w = self.window
        if w.is_count_based and w.emit == "current":
            # A count window's bounds move while it fills: its index names it.
            return [w.window_index_column, *w.group_by]
        index = [w.window_index_column] if w.is_count_based else []
        return [w.window_start_column, w.window_end_column, *index, *w.group_by]

    def output_columns(self) -> list[str]:
        """The one place that knows the output column order."""
        w = self.window
        index = [w.window_index_column] if w.is_count_based else []
        return [
            w.window_start_column,
            w.window_end_column,
            *index,
            *w.group_by,
            *(n for a in w.aggregations for n in a.output_names()),
            *([w.revision_column] if w.reopens else []),
        ]

    def to_document(self) -> dict[str, Any]:
        """The spec as the plain TOML-shaped dict it validates from: keys by their TOML
        names, defaults left out, secrets as their values. Edit it and ``model_validate``
        it to derive a spec."""
        return _plain(self.model_dump(by_alias=True, exclude_defaults=True))

    def to_toml(self) -> str:
        """The TOML ``load_spec`` reads back into an equal spec (secrets included)."""
        import tomli_w

        return tomli_w.dumps(self.to_document())


def _plain(value: Any) -> Any:
    """model_dump output without SecretStr wrappers (TOML needs the value itself)."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def check_changes(spec: PipelineSpec, first: Any) -> None:
    """A Debezium source's rows are changes of a table's rows: only a stage that takes
    changes (``takes_changes(source)``; its ``TAKES_CHANGES`` says how) reads them. A
    window, a join or an append would count an update as one more row and never take
    back what a delete removed: they need retracting operators, which flow-jobs has not."""
    takes = getattr(first, "takes_changes", None)
    for i, source in enumerate(spec.sources):
        if not source.changes or (takes is not None and takes(source.name)):
            continue
        ways = [m.TAKES_CHANGES for _, m in STAGE_SPECS.items() if hasattr(m, "TAKES_CHANGES")]
        raise key_error(
            f"sources[{i}].format",
            f'{source.name!r} is format = "debezium": its records are changes of a table\'s '
            f"rows (an update replaces a row, a delete takes one back), and {type(first).NOUN} "
            "would read each as one more event: it has no retraction. Read changes "
            + " or ".join(ways),
        )
