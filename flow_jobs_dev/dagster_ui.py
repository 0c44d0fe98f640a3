"""``dg dev`` on the checkout (``DagsterDev``), driven through ``dagster-graphql``'s client:
wait for the code location, launch an asset's run, await it. Used by the demo's UI, the
end-to-end test and ``docs/screenshot.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Self

import psutil
from dagster import DagsterRunStatus
from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

from flow_jobs_dev.service import Service

REPOSITORIES = (
    "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
)
#: Dagster's implicit job of a code location's assets: an asset's run is this job with
#: the asset selected (what the UI's "Materialize" launches).
ASSET_JOB = "__ASSET_JOB"
DONE = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)


def dagster_client(port: int) -> DagsterGraphQLClient:
    return DagsterGraphQLClient("127.0.0.1", port_number=port, timeout=60)


def query(client: DagsterGraphQLClient, text: str, **variables: Any) -> dict[str, Any]:
    """A query the client has no method for (its ``_execute``, which raises
    ``DagsterGraphQLClientError`` on a transport or GraphQL error)."""
    return client._execute(text, variables)


def wait_for_repository(
    client: DagsterGraphQLClient,
    server: subprocess.Popen[bytes],
    timeout_s: float = 180,
    abandon: threading.Event | None = None,
) -> dict[str, Any]:
    """The served repository, once the webserver answers and the code location loaded
    (``InterruptedError`` if ``abandon`` is set meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if abandon is not None and abandon.is_set():
            raise InterruptedError("stopped while the Dagster server was starting")
        if server.poll() is not None:
            raise RuntimeError(f"the Dagster server exited with {server.returncode}")
        try:
            nodes = query(client, REPOSITORIES)["repositoriesOrError"]["nodes"]
            if nodes:
                return nodes[0]
        except (DagsterGraphQLClientError, KeyError, TypeError):
            pass  # not listening yet, or still loading the code location
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Dagster server served no repository in {timeout_s} s")
        time.sleep(0.5)


def launch_asset_run(
    client: DagsterGraphQLClient, repository: dict[str, Any], asset: str, mode: str
) -> str:
    """Materialize a pipeline's assets (its target ``asset`` and its dead letters, which
    one step writes; its checks included) in a run mode; the run id."""
    return client.submit_job_execution(
        ASSET_JOB,
        repository_location_name=repository["location"]["name"],
        repository_name=repository["name"],
        run_config={"ops": {asset: {"config": {"mode": mode}}}},
        asset_selection=[asset, f"{asset}_dead_letters"],
    )


def await_run(client: DagsterGraphQLClient, run_id: str, timeout_s: float = 600) -> str:
    """The run's final status (``SUCCESS``, ``FAILURE`` or ``CANCELED``)."""
    deadline = time.monotonic() + timeout_s
    while (status := client.get_run_status(run_id)) not in DONE:
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} still {status.value} after {timeout_s} s")
        time.sleep(1)
    return status.value


class DagsterDev(Service):
    """``dg dev`` serving the dg project in ``project`` (the checkout: ``[tool.dg]`` in its
    pyproject.toml) on ``port``; ``start()`` returns once the code location is served.

    It runs in a process group of its own, so a terminal's Ctrl-C reaches only whoever
    started it, which then stops it (``stop()``): SIGINT to the group, as a terminal sends
    it, so that dg dev, its webserver, daemon, code servers and the runs they launched all
    shut down, and only then whatever the server was using (the demo's broker and its
    embedded Postgres). Dagster's INFO lines are left out (``log_level``): the caller says
    where the UI is and when it stopped; warnings and errors still show.
    """

    def __init__(
        self,
        project: Path,
        port: int,
        env: Mapping[str, str],
        log_level: str = "warning",
        output: IO[bytes] | None = None,
    ) -> None:
        self.project = project
        self.port = port
        self.env = dict(env)
        self.log_level = log_level
        self.output = output
        #: the served repository (its name and code location), once started
        self.repository: dict[str, Any] = {}
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 300, abandon: threading.Event | None = None) -> Self:
        """Started and serving the code location; stopped again if that fails, or if
        ``abandon`` is set first (``InterruptedError``)."""
        dg = Path(sys.executable).with_name("dg")
        if not dg.is_file():
            raise RuntimeError(f"no dg beside {sys.executable}: pip install 'flow-jobs[demo]'")
        env = dict(self.env)
        if sys.prefix != sys.base_prefix:
            # dg warns when the project's .venv is not the active environment: the one
            # running dg (this interpreter's) is, as if activated.
            env["VIRTUAL_ENV"] = sys.prefix
        # dg's script run by this interpreter, whatever its first line says
        command = [sys.executable, str(dg), "dev", "--port", str(self.port)]
        self._process = subprocess.Popen(
            [*command, "--log-level", self.log_level],
            cwd=self.project,
            env=env,
            stdout=self.output,
            stderr=subprocess.STDOUT if self.output is not None else None,
            process_group=0,
        )
        try:
            self.repository = wait_for_repository(
                dagster_client(self.port), self._process, timeout_s, abandon
            )
        except BaseException:
            self.stop()
            raise
        return self

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout_s: float = 60) -> None:
        """SIGINT to the server's process group; SIGKILL to what is left of it after
        ``timeout_s``. Returns once none of its processes runs."""
        process, self._process = self._process, None
        if process is None:
            return
        _signal_group(process.pid, signal.SIGINT)
        deadline = time.monotonic() + timeout_s
        while _group_running(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_running(process.pid):
            _signal_group(process.pid, signal.SIGKILL)
        process.wait()


def _group_running(pgid: int) -> bool:
    """Whether a process of the group still runs: dg dev, or one it started that outlives
    it a moment (an exited process nobody reaped yet does not count)."""
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                return True
        except ProcessLookupError:
            continue
    return False


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # every process of the group has exited
        os.killpg(pgid, signum)
