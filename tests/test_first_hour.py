"""A new user's first hour: their own producer's records all read, one clear line for a
missing topic or an unreachable broker, and a planner that waits out a restarting broker.

The embedded broker answers an end-offset query with the base offset of a partition's
last record batch + 1, so the rest of a batch a plain producer sent is
invisible to a planner that trusts the answer; the reader confirms each end with a fetch
(``flow_jobs.kafka.offsets.confirm_ends``)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

from flow_jobs.cli import main
from flow_jobs.kafka.offsets import ASKING_CONFIG, read_watermarks
from flow_jobs.kafka.options import KafkaSourceOptions
from flow_jobs.kafka.planning import KafkaStreamReader
from flow_jobs.kafka.retries import is_transient
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.produce import produce_file
from flow_jobs_dev.service import free_port
from tests.support import (
    assert_same_windows,
    make_spec,
    phase_window,
    random_clicks,
    read_windows,
    tumbling_reference,
)


def _clicks(seed: str, n: int) -> list[dict[str, Any]]:
    """Disordered clicks with NULL keys and values, several on one millisecond."""
    rng = random.Random(seed)
    events = random_clicks(rng, n, step_ms=100, disorder_ms=300)
    for i in range(0, n, 7):  # equal event times
        events[i]["ts"] = events[i - 1]["ts"] if i else events[i]["ts"]
    return events


def _plain_producer(
    bootstrap: str, topic: str, events: list[dict[str, Any]], **config: Any
) -> None:
    """A user's producer: confluent-kafka's defaults (batching included) unless
    ``config`` sets one, each event to partition i % 2, so both partitions advance
    together in event time."""
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    for i, event in enumerate(events):
        producer.produce(topic, json.dumps(event).encode(), partition=i % 2)
    assert producer.flush(30) == 0


def test_the_end_offsets_are_those_a_fetch_finds_not_the_brokers_batch_start(
    broker: EmbeddedBroker, topic: str
) -> None:
    # Every record in a batch of many, so each partition's end as the broker answers it
    # (its last batch's base offset + 1) falls short of the true end: with the default
    # 5 ms linger, a busy machine may send the last record in a batch of its own, and
    # the quirk this test needs would not show.
    events = _clicks("ends", 1_655)
    _plain_producer(broker.bootstrap_servers, topic, events, **{"linger.ms": 1000})
    options = KafkaSourceOptions(bootstrap_servers=broker.bootstrap_servers, topic=topic)
    consumer = Consumer({**options.consumer_config(), **ASKING_CONFIG})
    try:
        asked = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in (0, 1)
        }
        ends = {p: high for p, (_low, high) in read_watermarks(consumer, options).items()}
    finally:
        consumer.close()
    assert ends == {0: 828, 1: 827}
    assert asked[0] < 828 and asked[1] < 827, "the broker's quirk no longer shows: see above"


@pytest.mark.parametrize("per_batch", [None, 97], ids=["one-batch", "tiny-batches"])
def test_an_available_now_run_reads_every_record_a_plain_producer_sent(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path, per_batch: int | None
) -> None:
    events = _clicks(f"plain-{per_batch}", 1_655)
    _plain_producer(broker.bootstrap_servers, topic, events)
    source = {"max_offsets_per_trigger": per_batch} if per_batch else {}
    spec = make_spec(workdir, broker.bootstrap_servers, topic, phase_window(), source=source)
    summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.input_rows == len(events)
    assert summary.late_rows == 0
    assert_same_windows(
        read_windows(spec.target.path, spec.natural_key()), tumbling_reference(events)
    )


def test_make_produce_sends_a_json_lines_file_that_a_run_reads_whole(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """``make produce``'s sender: keyed by a field, so each user's clicks go to one
    partition (as a user's keyed producer spreads them), default batching."""
    events = _clicks("file", 1_200)
    lines = workdir / "clicks.jsonl"
    lines.write_text("".join(json.dumps(e) + "\n" for e in events) + "\n")  # a blank line
    delivered = produce_file(lines, broker.bootstrap_servers, topic, key_field="user_id")
    assert sum(delivered.values()) == len(events) and len(delivered) == 2
    spec = make_spec(workdir, broker.bootstrap_servers, topic, phase_window())
    summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.input_rows == len(events)
    assert_same_windows(
        read_windows(spec.target.path, spec.natural_key()), tumbling_reference(events)
    )


# -- mistakes a user can make: one line, no traceback, fast -------------------------------


def _cli(args: list[str], cwd: Path, timeout_s: float = 120) -> tuple[int, str, str, float]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "flow_jobs.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - began


def _spec_file(workdir: Path, bootstrap: str, topic: str, **source: Any) -> Path:
    doc = make_spec(workdir, bootstrap, topic, phase_window()).to_document()
    doc["sources"][0].update(source)
    path = workdir / "clicks.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def test_a_topic_that_does_not_exist_fails_the_run_at_start_in_one_line(workdir: Path) -> None:
    """A broker of its own: the error names the topics there."""
    with EmbeddedBroker() as broker:
        for name in ("clicks", "orders"):
            broker.create_topic(name, partitions=1)
        spec = _spec_file(workdir, broker.bootstrap_servers, "no-such-topic")
        code, out, err, took = _cli(["run", str(spec), "--available-now"], workdir)
        asking = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "t"})
        try:
            topics = asking.list_topics(timeout=10).topics
        finally:
            asking.close()
    assert "no-such-topic" not in topics, "created by the check"
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"error: source 'clicks': topic 'no-such-topic' does not exist on "
        f"{broker.bootstrap_servers} (topics there: clicks, orders); create it, or name an "
        "existing one in sources[0].topic"
    ]
    # stderr's one line says no JVM started (it prints its own); the time, no retries
    assert took < 30, f"{took:.1f} s"


def test_an_unreachable_broker_fails_the_run_within_its_connect_timeout_in_one_line(
    workdir: Path,
) -> None:
    address = f"127.0.0.1:{free_port()}"
    spec = _spec_file(workdir, address, "clicks", connect_timeout_ms=2_000)
    code, out, err, took = _cli(["run", str(spec), "--available-now"], workdir)
    assert code == 1 and out == ""
    [line] = err.splitlines()
    assert line.startswith(
        f"error: source 'clicks': no Kafka broker answered at {address} within 2 s ("
    )
    assert line.endswith(
        "; check sources[0].bootstrap_servers and that the broker runs "
        "(sources[0].connect_timeout_ms sets the wait)"
    )
    assert "retries" not in line
    assert took < 30, f"{took:.1f} s for a 2 s connect timeout: retried?"


# -- a broker restarting under the planner ------------------------------------------------


def test_an_unknown_partition_is_transient() -> None:
    """What a restarting broker's cluster answers for a partition its metadata lacks
    (seen failing a run under load: ``_UNKNOWN_PARTITION`` from a watermark query)."""
    with EmbeddedBroker() as b:
        b.create_topic("t", partitions=1)
        consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g"})
        try:
            consumer.list_topics("t", timeout=10)
            with pytest.raises(KafkaException) as raised:
                consumer.get_watermark_offsets(TopicPartition("t", 5), timeout=10)
        finally:
            consumer.close()
    err = raised.value.args[0]
    assert err.code() == KafkaError._UNKNOWN_PARTITION
    assert is_transient(err)


def test_the_planner_waits_out_a_broker_restart_for_its_end_offsets() -> None:
    """The reader's planning (``latestOffset``) asked while its broker is killed and
    started again on its port: it answers once the new broker holds the topic again,
    with the ends a fetch finds, instead of failing on the refused connections, the
    broker answering without the topic, or the partitions it does not know yet."""
    broker = EmbeddedBroker().start()
    port, topic = broker.port, "restarting"
    events = _clicks("restart", 400)
    broker.create_topic(topic, partitions=2)
    _plain_producer(broker.bootstrap_servers, topic, events[:300])
    options = KafkaSourceOptions(
        bootstrap_servers=broker.bootstrap_servers, topic=topic, retries=12, retry_backoff_ms=100
    )
    reader = KafkaStreamReader(options)
    started = reader.initialOffset()
    again: list[EmbeddedBroker] = []

    def restart() -> None:
        time.sleep(2.0)
        again.append(EmbeddedBroker(port=port).start())
        time.sleep(0.5)  # the planner finds a broker without the topic meanwhile
        again[0].create_topic(topic, partitions=2)
        _plain_producer(again[0].bootstrap_servers, topic, events)  # the old ones, then more

    try:
        assert reader.latestOffset(started, ReadAllAvailable()) == {topic: {"0": 150, "1": 150}}
        assert broker._process is not None
        broker._process.kill()
        broker._process.wait()
        thread = threading.Thread(target=restart)
        thread.start()
        began = time.monotonic()
        during = reader.latestOffset(started, ReadAllAvailable())
        waited = time.monotonic() - began
        thread.join()
        after = reader.latestOffset(started, ReadAllAvailable())
    finally:
        reader.stop()
        broker.stop()
        for b in again:
            b.stop()
    assert waited >= 2.0, "it answered before the broker was back"
    assert after == {topic: {"0": 200, "1": 200}}
    assert all(int(during[topic][p]) <= 200 for p in ("0", "1")), during


def test_a_run_that_fails_midway_ends_in_one_line_without_a_traceback(
    workdir: Path, postgres_url: str
) -> None:
    """A continuous run whose broker is killed once it has read (``retries = 0``): the
    failure is its last line, naming the source, the brokers and the setting, and no
    stack trace, task failure or traceback comes before it (``-v`` shows them); it comes
    about ``request_timeout_ms`` after the kill, not after the default 30 s."""
    broker = EmbeddedBroker().start()
    try:
        broker.create_topic("clicks", partitions=2)
        _plain_producer(broker.bootstrap_servers, "clicks", _clicks("midway", 200))
        spec = _spec_file(
            workdir, broker.bootstrap_servers, "clicks", retries=0, request_timeout_ms=2_000
        )
        doc = tomllib.loads(spec.read_text())
        doc["runtime"] = {"trigger_interval_ms": 200}
        spec.write_text(tomli_w.dumps(doc))
        process = subprocess.Popen(
            [sys.executable, "-m", "flow_jobs.cli", "run", str(spec)],
            cwd=workdir,
            env={
                **os.environ,
                "FLOW_STATE_STORE_URL": postgres_url,
                "FLOW_STATE_STORE_SCHEMA": f"t_{uuid.uuid4().hex[:12]}",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen: list[str] = []
        read = threading.Event()

        def watch() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                seen.append(line)
                if "test-pipeline batch 0:" in line:
                    read.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        assert read.wait(180), "".join(seen)[-3000:]
        assert broker._process is not None
        broker._process.kill()
        killed = time.monotonic()
        code = process.wait(timeout=180)
        failed_after = time.monotonic() - killed
        watcher.join(timeout=10)
    finally:
        broker.stop()
        if process.poll() is None:
            process.kill()
    text = "".join(seen)
    assert code == 1, text[-3000:]
    last = seen[-1].rstrip()
    # (in planning, or in a batch's read: "failed in micro-batch N (...)")
    assert re.match(
        r"error: pipeline test-pipeline failed( in micro-batch .*)?: Kafka clicks", last
    )
    assert f"raise retries (now 0) on source 'clicks', brokers {broker.bootstrap_servers}" in last
    assert "RuntimeError" not in last
    for noise in ("Traceback", " ERROR ", " WARN ", "Exception in task", "at org.apache"):
        assert noise not in text, (noise, text[-4000:])
    # the bound, the batch in flight and the JVM's stop; the default alone would be 30 s
    assert failed_after < 25, f"{failed_after:.1f} s"


def test_a_target_that_cannot_be_created_is_one_line(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (workdir / "a-file").write_text("not a folder")
    doc = make_spec(workdir, broker.bootstrap_servers, topic, phase_window()).to_document()
    doc["target"]["path"] = str(workdir / "a-file" / "table")
    spec = workdir / "spec.toml"
    spec.write_text(tomli_w.dumps(doc))
    assert main(["run", str(spec), "--available-now"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"error: Delta table {workdir}/a-file/table cannot be created: Not a directory; name "
        "a place the run can write in target.path"
    ]


def test_make_broker_and_make_produce_as_the_readme_gives_them(workdir: Path) -> None:
    """``make broker`` in a terminal, ``make produce`` beside it, then Ctrl-C: the
    records are there, make says nothing of the Ctrl-C, and the broker stops."""
    from tests.test_demo import Terminal

    port = free_port()
    events = workdir / "readings.jsonl"
    events.write_text(
        "".join(json.dumps({"device": f"d{i % 3}", "t": i}) + "\n" for i in range(50))
    )
    address = f"127.0.0.1:{port}"
    terminal = Terminal(
        ["make", "--no-print-directory", "broker", f"PORT={port}"], dict(os.environ), address
    )
    try:
        assert terminal.ready.wait(60), terminal.lines
        produce = ["produce", f"FILE={events}", "TOPIC=readings", f"BROKER={address}", "KEY=device"]
        sent = subprocess.run(
            ["make", "--no-print-directory", *produce], capture_output=True, text=True, timeout=120
        )
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.strip().endswith(
            f"sent 50 records from {events} to topic 'readings' (created, 2 partitions) on "
            f"{address}; per partition " + sent.stdout.split("per partition ")[-1].strip()
        )
        options = KafkaSourceOptions(bootstrap_servers=address, topic="readings")
        asking = Consumer({**options.consumer_config(), **ASKING_CONFIG})
        try:
            ends = read_watermarks(asking, options)
        finally:
            asking.close()
        assert sum(high for _low, high in ends.values()) == 50
        terminal.ctrl_c()
        code = terminal.process.wait(timeout=60)
    finally:
        if terminal.process.poll() is None:
            terminal.process.kill()
        terminal.close()
    text = "\n".join(terminal.lines)
    assert code == 0, text
    assert "broker stopped" in text and "make:" not in text and "Traceback" not in text, text
