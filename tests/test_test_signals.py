"""The suite's own footing: a test that runs Dagster in-process leaves SIGTERM as it
found it, so processes later tests start still stop on SIGTERM."""

from __future__ import annotations

import signal
import subprocess

from dagster._utils.interrupts import capture_interrupts

from tests.conftest import signals_kept


def test_dagster_in_process_leaves_sigterm_as_it_found_it() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a suite started in the background
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with signals_kept():
            with capture_interrupts():  # what Dagster's in-process execution does
                pass
            # Dagster's own leftover, which the context manager is there to undo:
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        child = subprocess.Popen(["sleep", "60"])
        child.terminate()
        assert child.wait(timeout=10) == -signal.SIGTERM
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
