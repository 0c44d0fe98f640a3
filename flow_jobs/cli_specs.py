"""A pipeline named on the command line, as the commands that read one find it
(``inspect``, ``state show``, ``target show``): its spec file as given, or the spec of
that name in the pipelines folder."""

from __future__ import annotations

from pathlib import Path

from flow_jobs.settings import Settings
from flow_jobs.spec import SPEC_SUFFIXES, SpecError, load_spec
from flow_jobs.spec.models import PipelineSpec


class SpecUsageError(ValueError):
    """A command line naming a pipeline that the spec it gives contradicts (the CLI's
    exit code 2)."""


class UnknownPipeline(LookupError):
    """A pipeline nobody knows: no run registered it, or no spec has its name (the CLI's
    exit code 1)."""


def resolve_spec(pipeline: str, spec_file: str | None) -> PipelineSpec:
    """A spec file as given, else the spec named ``pipeline`` in the pipelines folder."""
    if pipeline.endswith(SPEC_SUFFIXES):
        return load_spec(pipeline)
    if spec_file:
        spec = load_spec(spec_file)
        if spec.name != pipeline:
            raise SpecUsageError(f"--spec {spec_file} is pipeline {spec.name!r}, not {pipeline!r}")
        return spec
    folder = Settings.from_env().pipelines_dir or Path("pipelines")
    names = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in SPEC_SUFFIXES):
        try:
            spec = load_spec(path)
        except SpecError:
            continue  # another spec's problem; `flow-jobs validate` names it
        if spec.name == pipeline:
            return spec
        names.append(spec.name)
    raise UnknownPipeline(
        f"no spec named {pipeline!r} in {folder}/ (found: {', '.join(names) or 'none'}); "
        "give the spec file (flow-jobs inspect PATH.toml) or --spec PATH.toml"
    )
