"""Dagster entry point: ``dagster dev -w workspace.yaml``. It only assembles."""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions

from assets.pipelines import build_pipeline_assets

PIPELINES_DIR = Path(os.environ.get("FLOW_JOBS_PIPELINES_DIR", Path(__file__).parent / "pipelines"))

defs = Definitions(assets=build_pipeline_assets(PIPELINES_DIR))
