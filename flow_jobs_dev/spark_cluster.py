"""A Spark standalone cluster on loopback, from the PySpark wheel: a master and workers,
each its own JVM (``bin/spark-class …Master`` / ``…Worker``) with its own work dir.

For the tests and the benchmark (issue 14): what a user's cluster looks like to a
driver, on one machine. The workers start with a clean environment: no virtual
environment on their PATH and no PYTHONPATH, so their Python (``python3`` from PATH) has
neither flow-jobs nor its dependencies, and a job must ship them (``flow-jobs pack``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from flow_jobs_dev.service import Service, free_port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def worker_environment() -> dict[str, str]:
    """The environment a worker (and so each executor) starts with: this one without
    the driver's virtual environment or Python path."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
        and not k.startswith("SPARK_")
    }
    env.update(
        PATH=os.pathsep.join(path),
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
        SPARK_NO_DAEMONIZE="1",
    )
    return env


class StandaloneCluster(Service):
    """``with StandaloneCluster(workers=2) as cluster: cluster.master_url``"""

    def __init__(
        self,
        root: str | Path,
        workers: int = 2,
        cores_per_worker: int = 1,
        memory_per_worker: str = "1g",
        java_options: str | None = None,
    ) -> None:
        """``java_options``: for the master's, the workers' and their executors' JVMs
        (``JAVA_TOOL_OPTIONS``, which executors inherit from their worker)."""
        self.root = Path(root)
        self.java_options = java_options
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        # Every port chosen up front, all different: a JVM binds its own seconds later.
        ports: set[int] = set()
        while len(ports) < 2 + workers:
            ports.add(free_port())
        self.port, self.ui_port, *self._worker_ui_ports = sorted(ports)
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        launcher = str(spark_home() / "bin" / "spark-class")
        self._spawn(
            "master",
            [
                launcher,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            ],
        )
        for i in range(self.workers):
            work_dir = self.root / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            self._spawn(
                f"worker-{i}",
                [
                    launcher,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.cores_per_worker),
                    "--memory",
                    self.memory_per_worker,
                    "--work-dir",
                    str(work_dir),
                    "--webui-port",
                    str(self._worker_ui_ports[i]),
                    self.master_url,
                ],
                cwd=work_dir,
            )
        deadline = time.monotonic() + timeout_s
        while self.alive_workers() < self.workers:
            for process in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"Spark standalone {process.args[1]} exited with {process.returncode}; "
                        f"see {self.root}/*.log"
                    )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.alive_workers()} of {self.workers} workers registered with "
                    f"{self.master_url} after {timeout_s:.0f}s; see {self.root}/*.log"
                )
            time.sleep(0.2)
        return self

    def _spawn(self, name: str, command: list[str], cwd: Path | None = None) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        self._processes.append(
            subprocess.Popen(
                command,
                cwd=cwd or self.root,
                env=worker_environment()
                | ({"JAVA_TOOL_OPTIONS": self.java_options} if self.java_options else {}),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its executors are in its process group
            )
        )
        log.close()

    def state(self) -> dict:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.loads(r.read())

    def alive_workers(self) -> int:
        try:
            workers = self.state().get("workers", [])
        except (OSError, ValueError):  # not up yet
            return 0
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def stop(self) -> None:
        for process in reversed(self._processes):  # workers (and their executors) first
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for process in reversed(self._processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
