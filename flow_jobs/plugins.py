"""Extension points, and the plug-ins that fill them.

Every feature (a window family, an aggregator, an operator, a target's sink...) reaches
the core through a ``Registry``: the core asks the registry of its extension point for
the implementation a spec names (``kind = "tumbling"``, ``agg = "sum"``), and never
names one itself. The built-in features register themselves like any plug-in: their
packages are the entries of ``BUILTIN`` below, one line each.

A plug-in is a Python module that registers what it adds when it is imported. It is
found two ways:

* a spec's top-level ``plugins = ["my_company.flow_windows"]`` (imported before the rest
  of the spec is read, so its kinds validate);
* the ``flow_jobs.plugins`` entry-point group of an installed distribution::

      [project.entry-points."flow_jobs.plugins"]
      offset_windows = "my_company.flow_windows"

A plug-in module must be importable wherever the pipeline runs (the executors too, for
anything that runs there: ``flow-jobs pack --include``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

#: The built-in features, imported before any plug-in: each registers itself.
BUILTIN = (
    "flow_jobs.aggregations.registry",
    "flow_jobs.windows",
    "flow_jobs.plan.window_stage",
    "flow_jobs.joins.plugin",
    "flow_jobs.temporal_join.plugin",
    "flow_jobs.window_join.plugin",
    "flow_jobs.append.plugin",
    "flow_jobs.mirror.plugin",
    "flow_jobs.top_n.plugin",
    "flow_jobs.dedup.plugin",
    "flow_jobs.sinks.delta",
    "flow_jobs.sinks.postgres",
    "flow_jobs.sinks.kafka",
    "flow_jobs.sinks.iceberg",
)
ENTRY_POINT_GROUP = "flow_jobs.plugins"


class PluginError(ImportError):
    """A plug-in that cannot be loaded, or a name registered twice: one line naming it."""


class Registry(Generic[T]):
    """The implementations of one extension point, by name (a spec's ``kind``/``agg``)."""

    def __init__(self, point: str) -> None:
        self.point = point
        self._items: dict[str, T] = {}
        #: grows with each registration: what is built from the registry (a pydantic
        #: union of the families' models, say) is rebuilt when it changed
        self.version = 0

    def register(self, name: str, item: T) -> T:
        """Add ``item`` under ``name``; a name is registered once (a plug-in may not
        silently replace a built-in, or another plug-in)."""
        if name in self._items and self._items[name] is not item:
            raise PluginError(
                f"{self.point} {name!r} is registered twice: by {_origin(self._items[name])} "
                f"and by {_origin(item)}"
            )
        self._items[name] = item
        self.version += 1
        return item

    def get(self, name: str) -> T:
        load_builtins()
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(repr(n) for n in self._items)
            raise KeyError(f"no {self.point} {name!r} (registered: {known})") from None

    def names(self) -> tuple[str, ...]:
        load_builtins()
        return tuple(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        load_builtins()
        return iter(list(self._items.items()))

    def __contains__(self, name: object) -> bool:
        load_builtins()
        return name in self._items


def _origin(item: object) -> str:
    module = getattr(item, "__module__", None) or type(item).__module__
    return module or "?"


_builtins_loaded = False
_builtins_loading = False
#: held while the built-ins load: another thread asking a registry then waits for them
_loading = threading.RLock()
_loaded: set[str] = set()


def load_builtins() -> None:
    """Import the built-in features and the installed plug-ins (entry points), once."""
    global _builtins_loaded, _builtins_loading
    if _builtins_loaded:
        return
    with _loading:
        if _builtins_loaded or _builtins_loading:  # loaded, or a feature's import asking
            return
        _builtins_loading = True
        try:
            for module in BUILTIN:
                importlib.import_module(module)
            for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                _import(entry.value, f"entry point {entry.name!r} of group {ENTRY_POINT_GROUP}")
            _builtins_loaded = True
        finally:
            _builtins_loading = False


def load_plugins(modules: Iterable[str] = ()) -> None:
    """The built-ins, the installed plug-ins, then each module a spec names."""
    load_builtins()
    for module in modules:
        _import(module, "plugins")


def _import(module: str, where: str) -> None:
    if module in _loaded:
        return
    try:
        importlib.import_module(module)
    except PluginError:
        raise
    except Exception as error:  # any failure of a plug-in's import is one line
        raise PluginError(f"{where}: plug-in {module!r} cannot be imported: {error}") from error
    _loaded.add(module)
