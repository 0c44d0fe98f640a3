"""Where the state store is: ``[state_store] url``, ``FLOW_STATE_STORE_URL``, or an
embedded PostgreSQL 16 from the ``pgserver`` wheel started under the data folder and
reused by later runs; and the schema it uses."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from flow_jobs.ledger.schema import DEFAULT_SCHEMA
from flow_jobs.settings import Settings
from flow_jobs.spec.models import PipelineSpec

log = logging.getLogger(__name__)


def embedded_url(data_dir: str | Path) -> str:
    """Start (or reuse) the embedded PostgreSQL under ``data_dir``; its connection URL."""
    import pgserver

    path = Path(data_dir).resolve()
    path.mkdir(parents=True, exist_ok=True)
    # pgserver counts the processes holding the server (a run, Dagster, `flow-jobs state
    # show`) and stops it when the last one exits: nothing is left running after a demo.
    forget_dead_holders(path)
    server = pgserver.get_server(path, cleanup_mode="stop")
    return str(server.get_uri())


def forget_dead_holders(data_dir: Path) -> list[int]:
    """Drop the pids of processes that no longer exist from pgserver's list of holders.

    pgserver keeps the holders in ``.handle_pids.json`` and stops the server when the
    last one exits (atexit); a hard-killed run never removes its pid, so every later
    process would see another holder and leave the server running forever. pgserver
    has no API for this, hence this small repair. Returns the pids kept."""
    import psutil

    handles = data_dir / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return []
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        log.info("embedded Postgres: forgetting holders that exited: %s", set(pids) - set(alive))
        handles.write_text(json.dumps(alive))
    return alive


def state_store_url(spec: PipelineSpec | None = None) -> str:
    """``[state_store] url``, else ``FLOW_STATE_STORE_URL``, else the embedded server
    (under ``[state_store] embedded_dir``, else ``FLOW_DATA_DIR``)."""
    if spec is not None and spec.state_store.url is not None:
        return spec.state_store.url.get_secret_value()
    from_env = Settings.from_env().state_store_url
    if from_env is not None:
        return from_env.get_secret_value()
    embedded_dir = spec.state_store.embedded_dir if spec is not None else None
    return embedded_url(embedded_dir or default_embedded_dir())


def default_embedded_dir() -> str:
    return str(Settings.from_env().data_dir / ".flow" / "postgres")


def state_store_schema(spec: PipelineSpec | None = None) -> str:
    """``[state_store] schema``, else ``FLOW_STATE_STORE_SCHEMA``, else ``flow_jobs``."""
    from_spec = spec.state_store.schema_name if spec is not None else None
    return from_spec or Settings.from_env().state_store_schema or DEFAULT_SCHEMA
