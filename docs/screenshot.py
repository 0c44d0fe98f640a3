"""Regenerate docs/asset-*.png: the demo's Dagster UI, seen by headless Chromium.

    .venv/bin/python docs/screenshot.py      # needs Debian's chromium (apt-get install chromium)

Runs ``make demo``'s job with ``--ui`` (embedded broker, sample clicks, Dagster on a
free port), materializes ``clicks_per_minute`` through the GraphQL API so its checks are
evaluated, then renders the asset graph, the asset's checks and its overview to PNG.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flow_jobs_dev.dagster_ui import (  # noqa: E402
    await_run,
    dagster_client,
    launch_asset_run,
    wait_for_repository,
)
from flow_jobs_dev.service import free_port  # noqa: E402

PAGES = {
    # the `clicks` topic (an external asset) and the targets and dead letters it feeds
    "asset-graph.png": "/assets/kafka/clicks?view=lineage&lineageScope=downstream",
    "asset-checks.png": "/assets/clicks_per_minute?view=checks",
    # the asset's page: its code version (the spec's fingerprint), metadata, preview
    "asset-overview.png": "/assets/clicks_per_minute",
}


def chromium_screenshot(url: str, out: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium not found: apt-get install chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--hide-scrollbars",
                "--window-size=1500,1300",
                "--virtual-time-budget=20000",  # let the React app fetch and lay out
                f"--screenshot={out}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


def main() -> int:
    port = free_port()
    demo = subprocess.Popen(
        [sys.executable, "-m", "flow_jobs_dev.demo", "--data-dir", ".demo-ui", "--ui",
         "--ui-port", str(port)],
        cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    try:
        client = dagster_client(port)
        repository = wait_for_repository(client, demo, timeout_s=300)
        run_id = launch_asset_run(client, repository, "clicks_per_minute", "available_now")
        print(f"run {run_id}: {await_run(client, run_id)}")
        for name, path in PAGES.items():
            chromium_screenshot(f"http://127.0.0.1:{port}{path}", ROOT / "docs" / name)
            print(f"docs/{name} <- {path}")
    finally:
        os.killpg(demo.pid, signal.SIGINT)  # the demo stops dg dev, then the broker
        demo.wait(120)
        shutil.rmtree(ROOT / ".demo-ui", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
