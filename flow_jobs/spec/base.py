"""Shared pieces of the spec's models: the base model, name rules, error helpers, instants."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    SecretStr,
)
from pydantic_core import PydanticCustomError

from flow_jobs.plugins import PluginError, load_plugins

PIPELINE_NAME = re.compile(r"^[a-z0-9_-]+$")
SQL_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

#: Output column lists (a join's sides): names kept as they are, or a table of column ->
#: new name.
OutputColumns = list[str] | dict[str, str]

#: The column every source injects (the Kafka timestamp, or the arrival time in
#: processing-time mode) is ``flow_jobs.records.EVENT_TS``.
#: The struct of Kafka metadata a JSON source view carries (key, topic, partition,
#: offset, timestamp); count-based windows order a group's events by it.
KAFKA_COLUMN = "_kafka"


def key_error(key: str, message: str) -> PydanticCustomError:
    """An error about ``key`` of the model being validated.

    The loader appends ``key`` to the error's location, so the user reads the full
    dotted key (``transform.window.hop_ms``) whichever validator found the problem.
    """
    return PydanticCustomError("spec_key", "{key}: {message}", {"key": key, "message": message})


def import_plugins(modules: Any) -> None:
    """Import a spec's ``plugins`` (``flow_jobs.plugins``): one that fails is an error
    on its key (a value of the wrong type is left to the field's own check)."""
    for i, module in enumerate(modules if isinstance(modules, list) else []):
        if not isinstance(module, str):
            continue
        try:
            load_plugins([module])
        except PluginError as error:
            why = f"cannot be imported ({error.__cause__})" if error.__cause__ else str(error)
            raise key_error(
                f"plugins[{i}]", f"{module!r} {why}: install it, or put it on PYTHONPATH"
            ) from None


def not_supported(key: str, value: object, supported: tuple[str, ...] | str) -> PydanticCustomError:
    shown = supported if isinstance(supported, str) else ", ".join(map(repr, supported))
    return key_error(key, f"{key} = {value!r} is not supported yet; supported: {shown}")


def revealed(options: Mapping[str, SecretStr]) -> dict[str, str]:
    """Storage options as delta-rs takes them: revealed only where a table is opened."""
    return {k: v.get_secret_value() for k, v in options.items()}


#: Kafka's legal topic names (at most 249 characters of these).
KAFKA_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def dead_letter_topic_rule(topic: str | None, late_data: str) -> None:
    if topic is None:
        return
    if late_data != "dlq":
        raise key_error(
            "dead_letter_topic",
            f'dead_letter_topic is where late_data = "dlq" sends late rows; late_data is '
            f'"{late_data}": set late_data = "dlq" or remove it',
        )
    if not KAFKA_TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise key_error(
            "dead_letter_topic",
            f"dead_letter_topic = {topic!r} is not a Kafka topic name (letters, digits, "
            "'.', '_', '-'; at most 249)",
        )


def _identifier(key: str, value: str) -> None:
    if not SQL_IDENTIFIER.match(value):
        raise key_error(
            key, f"{key} = {value!r} is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)"
        )


def resolve_import_path(path: str) -> Callable[..., Any]:
    """``"package.module:function"`` to the function it names."""
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{path} is not callable")
    return target


def _import_path(value: Any) -> Any:
    """Facade: a callable becomes the import path TOML stores (and must resolve back)."""
    if not callable(value):
        return value
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
    if not module or "<" in qualname:
        raise ValueError(
            f"{qualname or value!r} is not a module-level function; TOML can only name "
            "functions by import path (module:function)"
        )
    path = f"{module}:{qualname}"
    try:
        resolved = resolve_import_path(path)
    except (ImportError, AttributeError, TypeError):
        resolved = None
    if resolved is not value:
        raise ValueError(f"{path} does not resolve back to the function given")
    return path


ImportPath = Annotated[str, BeforeValidator(_import_path)]


class SpecModel(BaseModel):
    """Base for every spec table: unknown keys are errors, models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def aware_instant(value: object, key: str) -> datetime:
    """An instant from an ISO-8601 string or a (TOML) datetime, in UTC; a time without
    a zone is refused: read on another machine it would mean another instant."""
    example = "2026-11-01T10:00:00Z"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{key} = {value!r} is not an ISO-8601 time; write e.g. {example!r}"
            ) from None
    if not isinstance(value, datetime):  # a bare TOML date, a number
        shown = value.isoformat() if isinstance(value, date) else repr(value)
        raise ValueError(f"{key} = {shown} is not a time; write e.g. {example!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{key} = {value.isoformat()!r} has no time zone; add one, e.g. "
            f"{value.isoformat()}Z (UTC) or {value.isoformat()}+01:00"
        )
    return value.astimezone(UTC)
