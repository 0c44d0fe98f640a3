"""Names a package hands on but imports on first use (PEP 562's module ``__getattr__``).

Every Python process Spark starts for the Kafka source imports ``flow_jobs``; pydantic
and the spec's models would cost each one ~0.1 s, so the packages whose names pull them
in (``flow_jobs``, ``flow_jobs.spec``) import them when a name is first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(
    package: str, names: Mapping[str, tuple[str, str]], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each of ``names`` (name -> (module,
    attribute)) imported on first use, then kept in ``namespace`` (its ``globals()``)."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = names[name]
        value = getattr(importlib.import_module(module), attribute)
        namespace[name] = value
        return value

    return __getattr__


def on_call(path: str) -> Callable[..., Any]:
    """The function at ``path`` (``"module:name"``, ``name`` may be dotted), imported
    when first called: a built-in feature registers its compile step or reading with
    this, so loading the registries does not import Spark plans, inspect or pandas."""
    module, _, attribute = path.partition(":")
    resolved: list[Callable[..., Any]] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not resolved:
            value: Any = importlib.import_module(module)
            for part in attribute.split("."):
                value = getattr(value, part)
            resolved.append(value)
        return resolved[0](*args, **kwargs)

    call.__module__, call.__qualname__ = module, attribute
    return call
