"""The driver JVM's console output, without the lines a user cannot act on.

The JVM and every process it starts (Spark's Python workers among them) write to the
JVM's stderr, outside Python's logging: the JVM's own ``WARNING: Using incubator
modules: jdk.incubator.vector`` (Spark's launcher always adds the module), the JDK's
warnings about native access, and PySpark's state-API driver worker, which prints five
lines about itself each time a query with a ``transformWithStateInPandas`` operator
starts. So, unless the run is verbose, flow-jobs starts the JVM itself (PySpark's
``launch_gateway``, as ``SparkContext`` would) with its stderr on a pipe, and a thread
copies each line to this process's stderr except those. Spark's own log lines are
quieted where they are made, in the log4j2 profile (``log4j2-quiet.properties``).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from typing import IO

from pyspark import SparkConf, SparkContext

#: Lines of the JVM's stderr that are not shown (unless verbose).
NOISE = re.compile(
    r"^(WARNING: Using incubator modules: jdk\.incubator\.vector"
    r"|WARNING: A restricted method in java\.lang\.System has been called"
    r"|WARNING: java\.lang\.System::load(Library)? has been called by "
    r"|WARNING: Use --enable-native-access=ALL-UNNAMED to avoid a warning"
    r"|WARNING: Restricted methods will be blocked in a future release"
    r"|(Starting )?Streaming TransformWithStateInPandas Python worker)"
)


def launch_filtered_gateway(conf: SparkConf) -> None:
    """Start the driver JVM for ``conf`` with its stderr filtered (``NOISE``); the next
    ``SparkContext`` uses it. Nothing happens when a JVM runs already."""
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
        stderr = gateway.proc.stderr  # type: ignore[attr-defined]
        thread = threading.Thread(
            target=forward, args=(stderr, 2), name="flow-jvm-stderr", daemon=True
        )
        thread.start()
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


def forward(lines: IO[bytes], fd: int) -> None:
    """Copy ``lines`` to ``fd`` as they come, without ``NOISE`` lines and the blank
    lines that follow one (PySpark's worker prints each of its lines with a blank one)."""
    dropped = False
    for line in iter(lines.readline, b""):
        text = line.decode("utf-8", "replace")
        if NOISE.match(text) or (dropped and not text.strip()):
            dropped = True
            continue
        dropped = False
        try:
            os.write(fd, line)
        except OSError:  # our stderr is gone: keep draining, or the JVM would block
            continue
