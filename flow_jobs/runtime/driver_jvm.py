"""The driver's JVM, started by flow-jobs (``start_driver_jvm``) rather than by PySpark's
session builder for one reason: its stderr, which it shares with ours, goes through a
filter that leaves out the one line nothing else turns off."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import IO

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway

#: What every Java 17+ JVM prints when it loads an incubator module: Spark's launcher
#: gives the driver ``--add-modules=jdk.incubator.vector`` whatever the settings
#: (``org.apache.spark.launcher.JavaModuleOptions``), and no JVM flag silences the note.
INCUBATOR_NOTE = b"WARNING: Using incubator modules: jdk.incubator.vector"


def start_driver_jvm(settings: Mapping[str, str]) -> SparkContext:
    """A new driver JVM and its SparkContext, ``settings`` given to spark-submit as the
    session builder gives them, the JVM's stderr copied to ours without
    ``INCUBATOR_NOTE``. Through PySpark's ``launch_gateway``, whose ``popen_kwargs`` are
    there to capture the JVM's output; the copy starts before the JVM, so that nothing it
    prints while starting can fill the pipe and stall it."""
    conf = SparkConf()
    for key, value in settings.items():
        conf.set(key, value)
    read_end, write_end = os.pipe()
    threading.Thread(
        target=_copy_without_note,
        args=(os.fdopen(read_end, "rb"),),
        name="driver-jvm-stderr",
        daemon=True,
    ).start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})
    finally:
        os.close(write_end)  # the JVM holds its own copy; EOF once it exits
    return SparkContext(conf=conf, gateway=gateway)


def _copy_without_note(stream: IO[bytes]) -> None:
    with stream:
        for line in stream:
            if line.rstrip(b"\r\n") != INCUBATOR_NOTE:
                _write_stderr(line)


def _write_stderr(data: bytes) -> None:
    """To this process's stderr (fd 2, where the JVM's would have gone); if that is
    closed, the line is dropped and the copy goes on, so that the JVM never blocks."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(2, view) :]
        except OSError:
            return
