"""The ``flow-jobs`` Dagster component: pipeline specs to definitions, for ``dg``.

A ``defs.yaml`` under ``assets/defs/`` names it, with either a folder of specs (every
``*.toml`` in it, including ones added later) or one spec file; relative paths resolve
against the folder holding the ``defs.yaml``::

    type: assets.component.FlowJobsPipelines
    attributes:
      specs_dir: ../../../pipelines     # or: spec: orders.toml

Each spec becomes what ``assets/factory.py`` builds for it. The resources are not the
component's: ``definitions.py`` sets them once for the code location (one set per
deployment), which is also what ``dg`` loads (``[tool.dg.project]`` in pyproject.toml).
"""

from pathlib import Path

import dagster as dg

from assets.factory import pipeline_definitions, spec_files


class FlowJobsPipelines(dg.Component, dg.Model, dg.Resolvable):
    """Every pipeline spec in ``specs_dir``, or the one ``spec`` file."""

    specs_dir: str | None = None
    spec: str | None = None

    def spec_paths(self, base: Path) -> list[Path]:
        if self.spec is not None and self.specs_dir is not None:
            raise ValueError("FlowJobsPipelines: set spec or specs_dir, not both")
        if self.spec is not None:
            path = (base / self.spec).resolve()
            if not path.is_file():
                raise FileNotFoundError(f"FlowJobsPipelines: spec = {self.spec!r}: no file {path}")
            return [path]
        folder = (base / (self.specs_dir or ".")).resolve()
        if not folder.is_dir():
            raise FileNotFoundError(
                f"FlowJobsPipelines: specs_dir = {self.specs_dir!r}: no folder {folder}"
            )
        return spec_files(folder)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        base = context.path if context.path.is_dir() else context.path.parent
        return dg.Definitions.merge(
            dg.Definitions(), *(pipeline_definitions(p) for p in self.spec_paths(base))
        )
