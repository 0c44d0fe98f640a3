"""TOML loader: ``tomllib`` + ``${ENV}`` interpolation + ``PipelineSpec.model_validate``."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flow_jobs.secrets import redact
from flow_jobs.spec.models import PipelineSpec

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


def parse_spec(
    text: str,
    origin: str = "<spec>",
    env: Mapping[str, str] | None = None,
    spec_dir: Path | None = None,
) -> PipelineSpec:
    """The spec in ``text``; a file it names (an ``.avsc``) is read relative to
    ``spec_dir`` (default: the working directory)."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(origin, [f"TOML syntax error: {e}"]) from None
    try:
        document = interpolate_env(document, os.environ if env is None else env)
    except SpecError as e:
        raise SpecError(origin, e.problems) from None
    try:
        return PipelineSpec.model_validate(document, context={"spec_dir": spec_dir})
    except ValidationError as e:
        raise SpecError(origin, format_validation_error(e)) from None


def load_spec(path: str | Path, env: Mapping[str, str] | None = None) -> PipelineSpec:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(str(p), [f"cannot read the file: {e.strerror}"]) from None
    return parse_spec(text, origin=str(p), env=env, spec_dir=p.parent)
