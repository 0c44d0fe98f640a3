"""``[target]`` and ``[dead_letter]``.

A target's keys are its kind's: each target kind is a sink package
(``flow_jobs.sinks``) whose spec model is a ``TargetSpec``, registered in
``TARGET_SPECS`` when the sink registers. ``validate_target`` reads ``[target]`` with
the model registered under its ``kind``, so the spec knows no kind by name (and imports
no sink).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    Discriminator,
    Field,
    SecretStr,
    Tag,
    TypeAdapter,
    model_serializer,
    model_validator,
)
from pydantic.functional_serializers import SerializerFunctionWrapHandler

from flow_jobs.plugins import Registry
from flow_jobs.spec.base import SpecModel, key_error


class TargetSpec(SpecModel):
    """``[target]``: the base of every target kind's spec model.

    A kind's model adds its keys and rules, and says what the spec's rules and the
    Dagster adapter need to know of it without writing anything.
    """

    kind: str
    #: the kind of a ``[target]`` that names none (one kind only)
    default: ClassVar[bool] = False
    #: What the target is when it can neither delete nor replace a row it wrote (e.g.
    #: "an append-only topic"), None when it can: a spec whose rows replace or delete
    #: earlier ones (top_n or session windows emitted "current") is refused for it.
    append_only: ClassVar[str | None] = None

    def describe(self) -> str:
        """Where it writes, in a few words: a path, a table, a topic."""
        return self.kind

    def short_name(self) -> str:
        """Its own name without where it lives (a folder's, a table's, a topic's): the
        Dagster asset's key."""
        return self.describe()

    def table_beside(self, suffix: str) -> tuple[str, dict[str, SecretStr]] | None:
        """Where a Delta table beside it goes (its location plus ``suffix``, its storage
        options), when it lives on object storage; None otherwise. The dead letters go
        there by default: a run on a short-lived machine loses its local disk."""
        return None

    def stored_under(
        self, root: str | None, storage_options: Mapping[str, str]
    ) -> dict[str, Any] | None:
        """Its keys changed by Dagster's object-storage resource: a relative location
        put under ``root``, ``storage_options`` added. None: the kind keeps no files."""
        return None

    @model_serializer(mode="wrap")
    def _with_kind(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The kind is written even where it is its model's default, so a document read
        # back names the same sink (a spec without kind reads as the default kind).
        return {"kind": self.kind, **handler(self)}


#: Every target kind's spec model, by ``[target] kind`` (``flow_jobs.sinks.register``
#: adds a sink's).
TARGET_SPECS: Registry[type[TargetSpec]] = Registry("target kind")


def default_kind() -> str:
    """The kind of a ``[target]`` that names none: the model whose ``default`` is true."""
    return next((name for name, model in TARGET_SPECS.items() if model.default), "")


def validate_target(value: Any, context: Any = None) -> Any:
    """``[target]`` as its kind's spec model; ``kind`` defaults to the default sink's.
    A value already a model is kept."""
    if not isinstance(value, Mapping):
        return value
    value = {"kind": default_kind(), **value}
    kind, kinds = value["kind"], TARGET_SPECS.names()
    if kind not in kinds:
        raise key_error("kind", f"kind = {kind!r} is not a target; use one of {kinds}")
    return _targets().validate_python(value, context=context)


_adapter: tuple[int, TypeAdapter[Any]] | None = None


def _targets() -> TypeAdapter[Any]:
    """The kinds' models as one union on ``kind`` (an error names the kind, as
    ``target.postgres.table``), rebuilt when a plug-in registered another kind."""
    global _adapter
    names = TARGET_SPECS.names()  # the built-ins loaded first: the version counts them
    if _adapter is None or _adapter[0] != TARGET_SPECS.version:
        members = tuple(Annotated[TARGET_SPECS.get(n), Tag(n)] for n in names)
        union = members[0] if len(members) == 1 else Union[members]  # noqa: UP007
        _adapter = (TARGET_SPECS.version, TypeAdapter(Annotated[union, Discriminator("kind")]))
    return _adapter[1]


def deleting_kinds() -> str:
    """The target kinds that can delete a row they wrote, as a spec error suggests them:
    "a delta or postgres target"."""
    kinds = [n for n, model in TARGET_SPECS.items() if model.append_only is None]
    return f"a {' or '.join(kinds)} target"


class DeadLetterSpec(SpecModel):
    """``[dead_letter]``: where undecodable rows go, with their bytes: a Delta table
    (``kind = "delta"``, the default) or the state store's ``dead_letters`` table."""

    kind: Literal["delta", "state_store"] = "delta"
    path: str | None = None
    #: delta-rs storage options of the table (credentials, endpoint): secrets.
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rules(self) -> DeadLetterSpec:
        if self.kind == "state_store" and self.path is not None:
            raise key_error("path", 'path is only for kind = "delta"')
        if self.kind == "state_store" and self.storage_options:
            raise key_error("storage_options", 'storage_options is only for kind = "delta"')
        return self
