"""The spec loader: a ``.toml`` file (``tomllib``) or a ``.sql`` one (``flow_jobs.sql``)
read into one TOML-shaped document, ``${ENV}`` interpolated, then
``PipelineSpec.model_validate``. A ``[transform].sql`` that is a whole windowed query is
lifted into the window keys it equals first, so both spellings are one spec."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flow_jobs.plugins import PluginError, load_plugins
from flow_jobs.secrets import redact
from flow_jobs.spec.aggregation import AGGREGATOR_RULES
from flow_jobs.spec.models import PipelineSpec

#: The file suffixes a pipeline spec may have.
SPEC_SUFFIXES = (".toml", ".sql")

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
#: Keys whose values are never echoed back in an error message.
_SECRET_KEYS = {"client_config", "url", "storage_options"}


class SpecError(ValueError):
    """A spec that cannot be loaded; each problem names the key (and value) at fault."""

    def __init__(self, origin: str, problems: list[str]) -> None:
        self.origin = origin
        self.problems = problems
        super().__init__(str(self))

    def __str__(self) -> str:
        if len(self.problems) == 1:  # one line: where, the key, what is wrong, what to do
            return f"{self.origin}: {self.problems[0]}"
        lines = "\n".join(f"  - {p}" for p in self.problems)
        return f"{self.origin}: invalid pipeline spec ({len(self.problems)} problems)\n{lines}"


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int) or str(part).startswith("["):
            out += f"[{part}]" if isinstance(part, int) else str(part)
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


#: Error types whose message is complete as is (no "(got ...)" appended).
_OWN_MESSAGES = ("value_error", "assertion_error", "spec_key", "union_tag_invalid")


def format_validation_error(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors():
        loc, msg = e["loc"], e["msg"].removeprefix("Value error, ")
        ctx = e.get("ctx") or {}
        if e["type"] == "spec_key":  # raised by a model validator about one of its keys
            loc, msg = (*loc, ctx["key"]), ctx["message"]
        elif e["type"] == "union_tag_invalid":  # a kind no member of the union has
            loc = (*loc, ctx["discriminator"].strip("'"))
            msg = f"Input should be {ctx['expected_tags']} (got {ctx['tag']!r})"
        elif e["type"] == "union_tag_not_found":
            loc, msg = (*loc, ctx["discriminator"].strip("'")), "required key is missing"
        key = _key_path(loc)
        if e["type"] == "extra_forbidden":
            msg = "unknown key; check its spelling against the spec reference"
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["type"] not in _OWN_MESSAGES and not (_SECRET_KEYS & {str(p) for p in e["loc"]}):
            msg = f"{msg} (got {e['input']!r})"
        problems.append(redact(f"{key}: {msg}"))  # a URL given where a table belongs
    return problems


def interpolate_env(value: Any, env: Mapping[str, str], key: str = "") -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of a parsed TOML document."""
    if isinstance(value, dict):
        return {k: interpolate_env(v, env, f"{key}.{k}" if key else k) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate_env(v, env, f"{key}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise SpecError(
            "spec", [f"{key}: environment variable {name} is not set and has no default"]
        )

    return _ENV_REF.sub(substitute, value)


def _aggregators(document: dict[str, Any]) -> Any:
    """The names ``agg`` takes, the spec's own plug-ins' among them (one that cannot be
    imported is reported by validation, on its key)."""
    try:
        plugins = document.get("plugins")
        load_plugins(plugins if isinstance(plugins, list) else [])
    except PluginError:
        pass
    return AGGREGATOR_RULES


#: The words a query the SQL front end lifts must contain (a window function, a window
#: table function, a JOIN): a ``[transform].sql`` without any is a pre-stage, and the
#: CLI need not import sqlglot to learn it. Recognising a query is the parser's job.
_LIFTED_WORDS = re.compile(
    r"(?i)\b(window|session_window|tumble|hop|cumulate|session|join|row_number)\b"
)


def _may_lift(sql: Any) -> bool:
    return isinstance(sql, str) and _LIFTED_WORDS.search(sql) is not None


def read_document(text: str, origin: str = "<spec>", sql: bool = False) -> dict[str, Any]:
    """The TOML-shaped document ``text`` is (a ``.sql`` pipeline file if ``sql``), with
    a windowed ``[transform].sql`` lifted into its window keys; ``${ENV}`` references
    are left as written."""
    if sql:
        from flow_jobs.sql import SqlError, read_pipeline  # sqlglot: only for SQL

        name = Path(origin).stem if origin != "<spec>" else "pipeline"
        try:
            return read_pipeline(text, name, _aggregators({}))
        except SqlError as e:
            raise SpecError(origin, [str(e.locate(text))]) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(origin, [f"TOML syntax error: {e}"]) from None
    transform = document.get("transform")
    if isinstance(transform, dict) and _may_lift(transform.get("sql")):
        from flow_jobs.sql import SqlError, lift_transform

        try:
            sources = document.get("sources")
            names = (
                [s.get("name") for s in sources if isinstance(s, dict)]
                if isinstance(sources, list)
                else []
            )
            document["transform"] = lift_transform(transform, _aggregators(document), names)
        except SqlError as e:
            raise SpecError(origin, [f"transform.sql: {e}"]) from None
    return document


def validate_document(
    document: dict[str, Any],
    origin: str = "<spec>",
    env: Mapping[str, str] | None = None,
    spec_dir: Path | None = None,
) -> PipelineSpec:
    """``document`` with ``${ENV}`` interpolated, as a spec."""
    try:
        document = interpolate_env(document, os.environ if env is None else env)
    except SpecError as e:
        raise SpecError(origin, e.problems) from None
    try:
        return PipelineSpec.model_validate(document, context={"spec_dir": spec_dir})
    except ValidationError as e:
        raise SpecError(origin, format_validation_error(e)) from None


def parse_spec(
    text: str,
    origin: str = "<spec>",
    env: Mapping[str, str] | None = None,
    spec_dir: Path | None = None,
    sql: bool = False,
) -> PipelineSpec:
    """The spec in ``text`` (a ``.sql`` pipeline file if ``sql``); a file it names (an
    ``.avsc``) is read relative to ``spec_dir`` (default: the working directory)."""
    return validate_document(read_document(text, origin, sql), origin, env, spec_dir)


def _read(path: str | Path) -> tuple[Path, str]:
    p = Path(path)
    try:
        return p, p.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(str(p), [f"cannot read the file: {e.strerror}"]) from None


def load_spec(path: str | Path, env: Mapping[str, str] | None = None) -> PipelineSpec:
    """The spec in the ``.toml`` or ``.sql`` file ``path``."""
    p, text = _read(path)
    return parse_spec(text, origin=str(p), env=env, spec_dir=p.parent, sql=p.suffix == ".sql")


def toml_twin(path: str | Path, env: Mapping[str, str] | None = None) -> str:
    """The TOML file equal to the spec in ``path`` (a ``.sql`` one, or a TOML one whose
    ``[transform].sql`` is a windowed query): the same spec, plan and fingerprint.
    ``${ENV}`` references stay as written; every other value takes its key's type."""
    import tomli_w

    p, text = _read(path)
    document = read_document(text, str(p), sql=p.suffix == ".sql")
    spec = validate_document(document, str(p), env, p.parent)
    return tomli_w.dumps(_typed(document, spec.model_dump(by_alias=True)))


def sql_twin(path: str | Path, env: Mapping[str, str] | None = None) -> str:
    """The ``.sql`` pipeline file equal to the spec in ``path`` (Flink SQL's spelling),
    checked by reading it back: the same spec, or a ``SpecError`` naming the key with
    no SQL form. ``${ENV}`` references stay as written."""
    p, text = _read(path)
    document = read_document(text, str(p), sql=p.suffix == ".sql")
    spec = validate_document(document, str(p), env, p.parent)
    from flow_jobs.sql import SqlError, render_pipeline

    try:
        sql = render_pipeline(document)
    except SqlError as e:
        raise SpecError(str(p), [f"no SQL form: {e}"]) from None
    twin = parse_spec(sql, str(p.with_suffix(".sql")), env, p.parent, sql=True)
    if twin != spec:
        changed = [k for k, v in spec.to_document().items() if twin.to_document().get(k) != v]
        raise SpecError(
            str(p), [f"no exact SQL form: {', '.join(changed) or 'a default'} would differ"]
        )
    return sql


def _typed(raw: Any, validated: Any) -> Any:
    """``raw`` (strings from SQL's WITH and SET) with each value the type its key has in
    ``validated`` (``'5000'`` -> 5000); a ``${ENV}`` reference is kept as written."""
    if isinstance(raw, dict) and isinstance(validated, dict):
        return {k: _typed(v, validated.get(k)) for k, v in raw.items()}
    if isinstance(raw, list) and isinstance(validated, list) and len(raw) == len(validated):
        return [_typed(r, v) for r, v in zip(raw, validated, strict=True)]
    if isinstance(raw, str) and "${" not in raw and isinstance(validated, bool | int | float):
        return validated
    return raw
