"""A running ``dagster dev`` driven through ``dagster-graphql``'s client: wait for the code
location, launch an asset's run, await it. Used by the end-to-end test and
``docs/screenshot.py``.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from dagster import DagsterRunStatus
from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

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
    client: DagsterGraphQLClient, server: subprocess.Popen[bytes], timeout_s: float = 180
) -> dict[str, Any]:
    """The served repository, once the webserver answers and the code location loaded."""
    deadline = time.monotonic() + timeout_s
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"dagster dev exited with {server.returncode}")
        try:
            nodes = query(client, REPOSITORIES)["repositoriesOrError"]["nodes"]
            if nodes:
                return nodes[0]
        except (DagsterGraphQLClientError, KeyError, TypeError):
            pass  # not listening yet, or still loading the code location
        if time.monotonic() > deadline:
            raise TimeoutError(f"dagster dev did not serve a repository in {timeout_s} s")
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
