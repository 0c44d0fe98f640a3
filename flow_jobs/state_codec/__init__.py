"""Operator state in a format of our own: a versioned header and an Arrow IPC body.

What the operators keep in Spark's state store (a window group's state, a dedup or
temporal-join bucket) and what ``top_n`` keeps in ``window_standings`` is written here,
never pickled, so a checkpoint does not depend on where a class lives or what it is
called. A blob is::

    b"FJST"  | version (uint16, big-endian) | type name length (uint16) | type name (UTF-8)
    | an Arrow IPC stream: one record batch of one row, a column per field

The type name (``window.group``, ``dedup.bucket``...) is the state's stable name,
declared by its class beside its fields and never changed; the fields are that
class's explicit schema (a sequence is a list column, fixed-size when not empty; a
record a struct column; rows of several columns a list of structs), so any Arrow reader
can open a blob. Version 1 is this layout. A blob without the header is "version 0", a
pickle written before the format existed: only ``flow_jobs.state_codec.legacy`` reads
it. A version this code does not know stops the run with an error naming it.

A class saved here declares ``STATE_TYPE``, ``to_fields`` (its fields, each a one-row
Arrow array: ``scalar``, ``listed``, ``nested``, ``table``) and ``from_fields`` (a
``Fields``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, Self, TypeVar

import numpy as np
import pyarrow as pa

__all__ = [
    "Fields",
    "SavedState",
    "StateFormatError",
    "dump",
    "listed",
    "load",
    "nested",
    "numbers",
    "scalar",
    "table",
]

MAGIC = b"FJST"
#: The layout ``dump`` writes.
VERSION = 1
_HEADER = struct.Struct(">4sHH")


class StateFormatError(ValueError):
    """A blob this release cannot read."""


class SavedState(Protocol):
    """A state saved in this format: its stable name and its explicit fields."""

    #: the name in every blob of this state; never change it (a checkpoint holds it)
    STATE_TYPE: ClassVar[str]

    def to_fields(self) -> dict[str, pa.Array]:
        """The state's fields, each a one-row Arrow array."""
        ...

    @classmethod
    def from_fields(cls, fields: Fields) -> Self:
        """The state from the fields ``to_fields`` wrote."""
        ...


S = TypeVar("S", bound=SavedState)


# -- writing --------------------------------------------------------------------------


def dump(state: SavedState) -> bytes:
    """``state`` as a blob of the current version."""
    return dump_fields(state.STATE_TYPE, state.to_fields())


def dump_fields(type_name: str, fields: Mapping[str, pa.Array]) -> bytes:
    """A blob of ``fields`` (one-row arrays, at least one) under ``type_name``."""
    batch = pa.RecordBatch.from_arrays(list(fields.values()), names=list(fields))
    name = type_name.encode()
    # the schema message then the batch's: an IPC stream (without a stream writer's cost)
    body = batch.schema.serialize().to_pybytes() + batch.serialize().to_pybytes()
    return _HEADER.pack(MAGIC, VERSION, len(name)) + name + body


def scalar(value: Any, type: pa.DataType) -> pa.Array:
    """A one-row field holding one value (None: NULL)."""
    return pa.array([value], type)


def listed(values: np.ndarray | pa.Array | list[Any], type: pa.DataType | None = None) -> pa.Array:
    """A one-row field holding a sequence (a numpy array is not copied)."""
    array = values if isinstance(values, pa.Array) else pa.array(values, type)
    if len(array):  # a fixed-size list: no offsets to build, a few times quicker
        return pa.FixedSizeListArray.from_arrays(array, len(array))
    return pa.ListArray.from_arrays(pa.array([0, 0], pa.int32()), array)


def table(columns: Mapping[str, np.ndarray | pa.Array]) -> pa.Array:
    """A one-row field holding rows: columns of one length, as a list of structs (one
    field, not a list per column: each Arrow array costs microseconds to build)."""
    arrays = [c if isinstance(c, pa.Array) else pa.array(c) for c in columns.values()]
    return listed(pa.StructArray.from_arrays(arrays, names=list(columns)))


def nested(fields: Mapping[str, pa.Array]) -> pa.Array:
    """A one-row field holding a record of fields (a struct)."""
    if not fields:  # a struct of no fields would have no length
        return pa.array([{}], pa.struct([]))
    return pa.StructArray.from_arrays(list(fields.values()), names=list(fields))


# -- reading --------------------------------------------------------------------------


def version_of(data: bytes) -> int:
    """The blob's format version: 0 for a legacy pickle (no header)."""
    if not data.startswith(MAGIC):
        return 0
    return int(_HEADER.unpack_from(data)[1])


def load(data: bytes, cls: type[S]) -> S:
    """The state of class ``cls`` in a blob of any version this release reads."""
    version = version_of(data)
    if version == 0:
        # Imported here: the legacy reader maps old pickles onto the state classes,
        # which import this module.
        from flow_jobs.state_codec import legacy

        return legacy.load(data, cls)
    return cls.from_fields(load_fields(data, cls.STATE_TYPE))


def load_fields(data: bytes, type_name: str) -> Fields:
    """The fields of a blob of the current version, which must hold ``type_name``."""
    version = version_of(data)
    if version != VERSION:
        raise StateFormatError(
            f"state blob format version {version} is not one this flow-jobs reads "
            f"(0 and {VERSION}): a newer release wrote it; run that release, or reset the "
            "checkpoint"
        )
    _, _, length = _HEADER.unpack_from(data)
    start = _HEADER.size + length
    found = data[_HEADER.size : start].decode()
    if found != type_name:
        raise StateFormatError(
            f"state blob holds {found!r}, expected {type_name!r}: the checkpoint was "
            "written by another operator; reset it"
        )
    batch = pa.ipc.open_stream(pa.py_buffer(data)[start:]).read_next_batch()
    return Fields(dict(zip(batch.schema.names, batch.columns, strict=True)))


class Fields:
    """A saved state's fields by name, as ``to_fields`` wrote them (one-row arrays)."""

    def __init__(self, columns: Mapping[str, pa.Array]) -> None:
        self.columns = dict(columns)

    def names(self) -> list[str]:
        return list(self.columns)

    def value(self, name: str) -> Any:
        """A ``scalar`` field's value, as a Python object (None: NULL)."""
        return self.columns[name][0].as_py()

    def values(self, name: str) -> pa.Array:
        """A ``listed`` field's sequence, as Arrow values."""
        # ``values``, not ``flatten()``: a blob's one-row lists start at 0, unsliced
        return self.columns[name].values

    def array(self, name: str) -> np.ndarray:
        """A ``listed`` field of numbers, as a numpy array of its own (writable)."""
        return numbers(self.values(name))

    def table(self, name: str) -> dict[str, pa.Array]:
        """A ``table`` field's columns, by name."""
        rows = self.values(name)
        return {f.name: rows.field(i) for i, f in enumerate(rows.type)}

    def nested(self, name: str) -> Fields:
        """A ``nested`` field's record."""
        column = self.columns[name]
        return Fields({f.name: column.field(i) for i, f in enumerate(column.type)})

    def record(self) -> dict[str, Any]:
        """Every field's value, as Python objects."""
        return {name: column[0].as_py() for name, column in self.columns.items()}


def numbers(values: pa.Array) -> np.ndarray:
    """Arrow numbers as a numpy array of their own (writable: a state changes in place)."""
    return values.to_numpy(zero_copy_only=False, writable=True)
