"""A small client of a running ``dagster dev``'s GraphQL API: wait for the code location,
launch an asset's run, await it. Used by the end-to-end test and ``docs/screenshot.py``.
(The ``dagster-graphql`` package's client needs ``gql``, which Dagster does not install.)
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from typing import Any

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
RUN = "query Run($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"
REPOSITORIES = (
    "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
)
DONE = ("SUCCESS", "FAILURE", "CANCELED")


def graphql(port: int, query: str, **variables: Any) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.loads(response.read())
    if "errors" in body:
        raise RuntimeError(f"GraphQL errors: {body['errors']}")
    return body["data"]


def wait_for_repository(
    port: int, server: subprocess.Popen[bytes], timeout_s: float = 180
) -> dict[str, Any]:
    """The served repository, once the webserver answers and the code location loaded."""
    deadline = time.monotonic() + timeout_s
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"dagster dev exited with {server.returncode}")
        try:
            nodes = graphql(port, REPOSITORIES)["repositoriesOrError"]["nodes"]
            if nodes:
                return nodes[0]
        except (OSError, KeyError, TypeError, RuntimeError):
            pass  # not listening yet, or still loading the code location
        if time.monotonic() > deadline:
            raise TimeoutError(f"dagster dev did not serve a repository in {timeout_s} s")
        time.sleep(0.5)


def launch_asset_run(port: int, repository: dict[str, Any], asset: str, mode: str) -> str:
    """Materialize one asset (its checks included) in a run mode; the run id."""
    launched = graphql(
        port,
        LAUNCH,
        params={
            "selector": {
                "repositoryLocationName": repository["location"]["name"],
                "repositoryName": repository["name"],
                "jobName": "__ASSET_JOB",
                "assetSelection": [{"path": [asset]}],
            },
            "runConfigData": {"ops": {asset: {"config": {"mode": mode}}}},
            "mode": "default",
        },
    )["launchRun"]
    if launched["__typename"] != "LaunchRunSuccess":
        raise RuntimeError(f"launchRun: {launched}")
    return str(launched["run"]["runId"])


def await_run(port: int, run_id: str, timeout_s: float = 600) -> str:
    """The run's final status."""
    deadline = time.monotonic() + timeout_s
    while (status := graphql(port, RUN, id=run_id)["runOrError"]["status"]) not in DONE:
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} still {status} after {timeout_s} s")
        time.sleep(1)
    return str(status)
