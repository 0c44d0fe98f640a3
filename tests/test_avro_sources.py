"""Sources of the registry formats (``format = "avro" | "protobuf" | "json_schema"``): a
topic written by confluent-kafka's own serializer under two schema versions, read through
flow_jobs_dev's registry, gives the windows of the independent reference (and, for Avro,
of the same events in JSON), as one micro-batch and as tiny ones; every record that
cannot be decoded is a dead letter with its reason."""

from __future__ import annotations

import json
import random
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.errors import PlanError
from flow_jobs.formats import format_module
from flow_jobs.io.delta import read_delta
from flow_jobs.kafka.options import REGISTRY_PREFIX, SECRET_PREFIX, KafkaSourceOptions
from flow_jobs.plan.kafka_reader import REGISTRY_SECRETS
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec import SpecError, load_spec, parse_spec
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from flow_jobs_dev.schema_registry import EmbeddedSchemaRegistry
from tests import test_joins as joins
from tests.reference import reference_windows
from tests.reference_join import reference_join
from tests.registry_payloads import click_serializer
from tests.support import (
    assert_same_windows,
    make_spec,
    random_clicks,
    read_windows,
    send,
    to_records,
)
from tests.test_poison_pills import _dead_letters


def _click(*extra: dict[str, Any], qty: str = "int") -> dict[str, Any]:
    nullable = ["null", "string"]
    return {
        "type": "record",
        "name": "Click",
        "namespace": "shop",
        "fields": [
            {"name": "user_id", "type": nullable},
            {"name": "page", "type": nullable},
            {"name": "amount", "type": ["null", "double"]},
            {"name": "qty", "type": ["null", qty]},
            {"name": "ts", "type": "long"},
            *extra,
        ],
    }


V1 = _click()
#: v2 (the reader, "latest"): qty promoted int -> long, channel added with a default
V2 = _click({"name": "channel", "type": ["null", "string"], "default": None}, qty="long")
AGGREGATIONS = [
    ("count", None, "n"),
    ("sum", "amount", "amount_sum"),
    ("max", "qty", "qty_max"),
    ("first", "page", "first_page"),
    ("last", "amount", "last_amount"),
]
WINDOW = {
    "kind": "tumbling",
    "duration_ms": 10_000,
    "lateness_ms": 2_000,
    "event_time_column": "ts",
    "group_by": ["user_id"],
    "aggregations": [
        {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
    ],
}


@pytest.fixture(scope="module")
def registry() -> Iterator[EmbeddedSchemaRegistry]:
    with EmbeddedSchemaRegistry() as server:
        yield server


def _reference(events: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """WINDOW's windows of ``events`` by the independent reference (tests/reference.py)."""
    return reference_windows(
        events,
        kind="tumbling",
        time_key="ts",
        duration_ms=10_000,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - 2_000,
    )


def _avro_spec(workdir: Path, bootstrap: str, topic: str, url: str, **source: Any) -> PipelineSpec:
    return _registry_spec(workdir, bootstrap, topic, url, "avro", **source)


def _registry_spec(
    workdir: Path, bootstrap: str, topic: str, url: str, fmt: str, **source: Any
) -> PipelineSpec:
    doc = make_spec(workdir, bootstrap, topic, WINDOW, name=f"{fmt}-clicks").to_document()
    doc["sources"][0].pop("schema")
    doc["sources"][0].update(format=fmt, schema_registry={"url": url}, **source)
    return PipelineSpec.model_validate(doc)


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_a_topic_of_two_schema_versions_gives_the_reference_windows(
    spark: SparkSession,
    broker: EmbeddedBroker,
    registry: EmbeddedSchemaRegistry,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
) -> None:
    """Records written by the format's own serializer under two schema versions, keys
    over three partitions, disorder, equal timestamps, NULLs: the reference's windows as
    one micro-batch and as batches of 40; for Avro, the JSON topic's windows too."""
    rng = random.Random(fmt)
    events = [
        {k: v for k, v in e.items() if k != "at"}
        for e in random_clicks(rng, 400, step_ms=120, disorder_ms=1_000)
    ]
    for i in range(0, 60, 3):  # ties: equal event times, other keys and partitions
        events[i + 1]["ts"] = events[i]["ts"]
    bootstrap = broker.bootstrap_servers
    json_topic, topic = (f"clicks-{f}-{rng.randrange(1 << 30):x}" for f in ("json", fmt))
    for name in (json_topic, topic):
        broker.create_topic(name, partitions=3)
    records = to_records(events, partitions=3)
    for i, e in enumerate(events):  # the Kafka position: first / last break ties by it
        e["_arrival"] = (i % 3, i // 3)

    client = SchemaRegistryClient({"url": registry.url})
    old, new = (click_serializer(fmt, client, topic, v2) for v2 in (False, True))
    half = len(events) // 2
    framed = [
        Record((old if i < half else new)(e), r.partition, r.key, r.timestamp_ms)
        for i, (e, r) in enumerate(zip(events, records, strict=True))
    ]
    good = framed[0].value
    assert good is not None
    title = format_module(fmt).TITLE
    bad = [  # each a dead letter, with its reason
        (b"\x01" + good[1:], "magic byte 1"),
        (b"\x00" + struct.pack(">I", 4242) + good[5:], "schema id 4242 is not in the registry"),
        (good[:-2], f"undecodable {title} body"),
        (b"", "no schema id"),
    ]
    at = events[half]["ts"]
    framed += [Record(value, 0, b"x", at) for value, _ in bad]
    send(bootstrap, topic, framed)

    whole = _registry_spec(workdir / "one", bootstrap, topic, registry.url, fmt)
    assert [f.name for f in whole.sources][:1] == ["clicks"]
    path = workdir / "one.toml"
    path.write_text(whole.to_toml())
    assert main(["validate", str(path), "--plan"]) == 0  # the decoded rows fold
    assert re.search(r"pre-aggregation +on: the Kafka reader folds", capsys.readouterr().out)
    assert main(["run", str(path), "--available-now"]) == 0  # bad records: dead letters
    tiny = _registry_spec(
        workdir / "tiny", bootstrap, topic, registry.url, fmt, max_offsets_per_trigger=40
    )
    tiny_summary = PipelineRunner(tiny, spark).run(available_now=True)
    assert tiny_summary.dead_lettered == len(bad)
    assert tiny_summary.batches >= 8

    expected = _reference(events)
    key = whole.natural_key()
    assert_same_windows(read_windows(whole.target.path, key), expected)
    assert_same_windows(read_windows(tiny.target.path, key), expected)
    if fmt == "avro":  # the same events in JSON: the same windows
        send(bootstrap, json_topic, records)
        as_json = make_spec(workdir / "json", bootstrap, json_topic, WINDOW)
        PipelineRunner(as_json, spark).run(available_now=True)
        assert_same_windows(read_windows(as_json.target.path, key), expected)

    letters = _dead_letters(whole)
    assert sorted(v for v, _ in letters.values()) == sorted(v for v, _ in bad)
    reasons = {v: reason for v, reason in letters.values()}
    for value, fragment in bad:
        assert fragment in reasons[value], (fragment, reasons[value])


def test_a_registry_that_cannot_be_reached_names_the_key_without_the_password(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    doc = _avro_spec(workdir, broker.bootstrap_servers, "t", "http://127.0.0.1:9").to_document()
    doc["sources"][0]["schema_registry"]["basic_auth_user_info"] = "me:s3cret-pw"
    spec = PipelineSpec.model_validate(doc)
    with pytest.raises(PlanError) as refused:
        PipelineRunner(spec, spark).run(available_now=True)
    message = str(refused.value)
    assert message.startswith("sources[0].schema_registry.url: cannot reach the schema registry")
    assert "http://127.0.0.1:9" in message and "s3cret" not in message


def test_a_subject_the_registry_lacks_names_the_subject(
    spark: SparkSession, broker: EmbeddedBroker, registry: EmbeddedSchemaRegistry, workdir: Path
) -> None:
    spec = _avro_spec(workdir, broker.bootstrap_servers, "no-such-topic", registry.url)
    with pytest.raises(PlanError, match=r"sources\[0\]\.subject: .*'no-such-topic-value'"):
        PipelineRunner(spec, spark).run(available_now=True)


def test_validate_reads_the_reader_schema_from_the_registry(
    registry: EmbeddedSchemaRegistry, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``flow-jobs validate`` asks the registry: an unreachable one is one line naming the
    key and the URL, never the password; a known subject validates."""
    spec = _avro_spec(workdir, "127.0.0.1:9092", "validated", "http://127.0.0.1:9")
    doc = spec.to_document()
    doc["sources"][0]["schema_registry"]["basic_auth_user_info"] = "me:s3cret-pw"
    path = workdir / "avro.toml"
    path.write_text(PipelineSpec.model_validate(doc).to_toml())
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "sources[0].schema_registry.url: cannot reach the schema registry at " in err
    assert "http://127.0.0.1:9" in err and "s3cret" not in err

    SchemaRegistryClient({"url": registry.url}).register_schema(
        "validated-value", Schema(json.dumps(V2), "AVRO")
    )
    doc["sources"][0]["schema_registry"]["url"] = registry.url
    path.write_text(PipelineSpec.model_validate(doc).to_toml())
    assert main(["validate", str(path)]) == 0
    assert "valid" in capsys.readouterr().out


SMALL = '{"type": "record", "name": "R", "fields": [{"name": "v", "type": "long"}]}'


@pytest.mark.parametrize(
    ("source", "key", "fragment"),
    [
        ({"format": "avro"}, "schema_registry", "needs [sources.schema_registry] url"),
        ({"format": "protobuf"}, "schema_registry", "needs [sources.schema_registry] url"),
        (
            {
                "format": "avro",
                "schema_registry": {"url": "http://r:8081", "bearer_auth_token": "t"},
            },
            "bearer_auth_logical_cluster",
            "bearer auth needs bearer_auth_logical_cluster",
        ),
        (
            {
                "format": "avro",
                "schema_registry": {
                    "url": "http://r:8081",
                    "bearer_auth_token": "t",
                    "basic_auth_user_info": "a:b",
                    "bearer_auth_logical_cluster": "l",
                },
            },
            "basic_auth_user_info",
            "give one way to authenticate",
        ),
        (
            {
                "format": "avro",
                "schema_registry": {
                    "url": "http://r:8081",
                    "oauth_client_id": "c",
                    "bearer_auth_logical_cluster": "l",
                },
            },
            "oauth_client_id",
            "OAuth needs oauth_client_id, oauth_client_secret",
        ),
        (
            {"format": "avro", "schema_registry": {"url": "http://r:8081"}, "avro_schema": SMALL},
            "avro_schema",
            "not both",
        ),
        ({"subject": "s"}, "subject", "only for a format read through a registry"),
        ({"format": "avro", "avro_schema": SMALL, "version": 2}, "version", "registry"),
        ({"format": "avro", "avro_schema": "no-such.avsc"}, "avro_schema", "cannot read"),
        (
            {
                "format": "avro",
                "avro_schema": '{"type": "record", "name": "R", "fields": '
                '[{"name": "v", "type": ["int", "string"]}]}',
            },
            "avro_schema",
            "a union of int",
        ),
        (
            {
                "format": "json_schema",
                "schema_registry": {"url": "http://r:8081"},
                "message": "a.B",
            },
            "message",
            'only for format = "protobuf"',
        ),
        (
            {"format": "avro", "schema_registry": {"url": "http://u:p@r:8081"}},
            "url",
            "url holds credentials",
        ),
    ],
)
def test_registry_source_rules_name_the_key(source: dict, key: str, fragment: str) -> None:
    doc = make_spec(Path("/tmp/x"), "b:9092", "t", WINDOW).to_document()
    doc["sources"][0].update(source)
    if "schema" not in source and source.get("format", "json") != "json":
        doc["sources"][0].pop("schema")
    with pytest.raises(SpecError) as refused:
        parse_spec(tomli_w.dumps(doc), "spec.toml")
    assert key in str(refused.value) and fragment in str(refused.value)
    assert "u:p@" not in str(refused.value)


def test_the_registry_password_travels_under_an_option_spark_redacts() -> None:
    """The reader gets the registry's settings as options; the password's option name
    holds "secret", which Spark's default ``spark.redaction.regex`` redacts."""
    spec = _avro_spec(Path("/tmp/x"), "b:9092", "t", "http://r:8081")
    doc = spec.to_document()
    doc["sources"][0]["schema_registry"]["basic_auth_user_info"] = "me:pw"
    source = PipelineSpec.model_validate(doc).sources[0]
    assert source.schema_registry is not None
    config = source.schema_registry.client_config()
    names = {
        f"{REGISTRY_PREFIX}{SECRET_PREFIX if k in REGISTRY_SECRETS else ''}{k}": v
        for k, v in config.items()
    }
    assert names["registry.secret.basic.auth.user.info"] == "me:pw"
    options = KafkaSourceOptions.from_options({"bootstrap_servers": "b", "topic": "t", **names})
    assert dict(options.registry_config) == config


PAYMENT = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "order_id", "type": ["null", "string"]},
        {"name": "region", "type": "string"},
        {"name": "paid", "type": "double"},
        {"name": "ts", "type": "long"},
    ],
}


def test_a_join_of_an_avro_side_and_a_json_side_equals_the_reference(
    spark: SparkSession, broker: EmbeddedBroker, registry: EmbeddedSchemaRegistry, workdir: Path
) -> None:
    """Orders in JSON, payments in Avro: the inner join of tests/test_joins.py, the same
    rows as its reference."""
    rng = random.Random("avro-join")
    orders, payments = joins._streams(rng)
    close_l, close_r = joins._closing()
    topics = tuple(f"join-{side}-{rng.randrange(1 << 30):x}" for side in ("orders", "payments"))
    for topic in topics:
        broker.create_topic(topic, partitions=2)
    joins._send(broker, topics[0], [*orders, close_l])
    client = SchemaRegistryClient({"url": registry.url})
    serialize = AvroSerializer(client, json.dumps(PAYMENT))
    context = SerializationContext(topics[1], MessageField.VALUE)
    send(
        broker.bootstrap_servers,
        topics[1],
        [
            Record(serialize(p, context), i % 2, timestamp_ms=p["ts"])
            for i, p in enumerate([*payments, close_r])
        ],
    )
    join = {"how": "inner", "time_window_ms": 4_000}
    doc = joins._spec(workdir, broker, topics, join).to_document()
    doc["sources"][1].pop("schema")
    doc["sources"][1].update(format="avro", schema_registry={"url": registry.url})
    spec = PipelineSpec.model_validate(doc)
    summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.late_rows == 0 and summary.dead_lettered == 0 and summary.batches >= 4

    lower, upper = spec.transform.join.bounds if spec.transform.join else (0, 0)
    expected = reference_join(
        orders,
        payments,
        left_keys=joins.KEYS,
        right_keys=joins.KEYS,
        left_time="ts",
        right_time="ts",
        lower=lower,
        upper=upper,
        how="inner",
        left_columns=["order_id", "region", "amount", "ts"],
        right_columns=["order_id", "region", "paid", "ts"],
    )
    rows = read_delta(spec.target.path).to_pylist()
    actual = sorted(
        (tuple(r[c] for c in joins.COMPARED) for r in rows),
        key=lambda t: tuple((v is None, v if v is not None else 0) for v in t),
    )
    assert expected, "the reference produced no row: the test would prove nothing"
    assert actual == expected


def test_a_schema_beside_the_registrys_must_agree_field_by_field(
    spark: SparkSession,
    registry: EmbeddedSchemaRegistry,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``validate`` names the field a declared ``schema`` disagrees on with the subject's."""
    SchemaRegistryClient({"url": registry.url}).register_schema(
        "beside-value", Schema(json.dumps(V2), "AVRO")
    )
    path = workdir / "beside.toml"
    agreeing = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT, channel STRING"
    for ddl, fragment in [
        (agreeing, None),
        (agreeing.replace("qty BIGINT", "qty INT"), "field qty is int here and bigint in the"),
        (agreeing.replace(", channel STRING", ""), "the schema of subject beside-value has"),
        (f"{agreeing}, extra INT", "field extra is not in the schema of subject beside-value"),
    ]:
        spec = _avro_spec(workdir, "127.0.0.1:9092", "beside", registry.url, schema=ddl)
        path.write_text(spec.to_toml())
        assert main(["validate", str(path)]) == (0 if fragment is None else 1)
        err = capsys.readouterr().err
        assert fragment is None or f"sources[0].schema: {fragment}" in err, err


def test_bare_avro_bodies_of_an_avsc_beside_the_spec(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    """``avro_schema = "click.avsc"``: records that are bare Avro bodies (no registry, no
    header) give the reference's windows; a body that does not decode is a dead letter."""
    import io

    import fastavro

    rng = random.Random("avsc")
    events = [
        {k: v for k, v in e.items() if k != "at"}
        for e in random_clicks(rng, 120, step_ms=200, disorder_ms=800)
    ]
    topic = f"clicks-avsc-{rng.randrange(1 << 30):x}"
    broker.create_topic(topic, partitions=2)
    records = to_records(events, partitions=2)
    parsed = fastavro.parse_schema(V2)

    def body(event: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {**event, "channel": None})
        return out.getvalue()

    bare = [
        Record(body(e), r.partition, r.key, r.timestamp_ms)
        for e, r in zip(events, records, strict=True)
    ]
    send(broker.bootstrap_servers, topic, [*bare, Record(b"\xff", 0, b"x", events[0]["ts"])])
    for i, e in enumerate(events):
        e["_arrival"] = (i % 2, i // 2)
    (workdir / "click.avsc").write_text(json.dumps(V2))
    doc = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW).to_document()
    doc["sources"][0].pop("schema")
    doc["sources"][0].update(format="avro", avro_schema="click.avsc")
    path = workdir / "avsc.toml"
    path.write_text(tomli_w.dumps(doc))
    spec = load_spec(path)
    assert spec.sources[0].avro_schema == json.dumps(V2)  # read beside the spec
    summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.dead_lettered == 1
    expected = _reference(events)
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)
    (reason,) = [r for _, r in _dead_letters(spec).values()]
    assert reason.startswith("undecodable Avro body: ")


def _deserializer(fmt: str, client: SchemaRegistryClient, subject: str):
    """confluent-kafka's own deserializer of ``fmt``, as a consumer of the topic runs it:
    a record -> a dict of the row's values (instants as aware datetimes)."""
    from datetime import UTC, datetime

    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        avro = AvroDeserializer(client)
        return lambda value, ctx: avro(value, ctx)
    if fmt == "json_schema":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        text = client.get_latest_version(subject).schema.schema_str
        as_json = JSONDeserializer(text, schema_registry_client=client)

        def from_json(value: bytes, ctx: Any) -> dict[str, Any]:
            row = as_json(value, ctx)
            for column in ("window_start", "window_end"):
                row[column] = datetime.fromisoformat(row[column])
            return row

        return from_json
    import base64

    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from google.protobuf import descriptor_pb2, message_factory

    from flow_jobs.formats.protobuf import pool_of

    # a consumer's generated class, here from the registered descriptor
    serialized = client.get_latest_version(subject, fmt="serialized").schema.schema_str
    proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    pool = pool_of([proto])
    cls = message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{proto.package}.{proto.message_type[0].name}")
    )
    as_proto = ProtobufDeserializer(cls, {"use.deprecated.format": False})

    def from_proto(value: bytes, ctx: Any) -> dict[str, Any]:
        message = as_proto(value, ctx)
        row: dict[str, Any] = {}
        for field in message.DESCRIPTOR.fields:
            if not message.HasField(field.name):
                row[field.name] = None
            elif field.message_type is not None:  # a Timestamp
                row[field.name] = getattr(message, field.name).ToDatetime(tzinfo=UTC)
            else:
                row[field.name] = getattr(message, field.name)
        return row

    return from_proto


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_a_kafka_target_in_a_registry_format_decodes_to_the_window_rows(
    spark: SparkSession,
    broker: EmbeddedBroker,
    registry: EmbeddedSchemaRegistry,
    workdir: Path,
    fmt: str,
) -> None:
    """``[target] format = "avro" | "protobuf" | "json_schema"``: the rows' schema is
    registered under ``<topic>-value``, and the records, read back with confluent-kafka's
    own deserializer, are the reference's window rows."""
    rng = random.Random(f"target-{fmt}")
    events = [
        {k: v for k, v in e.items() if k != "at"}
        for e in random_clicks(rng, 150, step_ms=150, disorder_ms=600)
    ]
    source_topic, out = (f"{p}-{fmt}-{rng.randrange(1 << 30):x}" for p in ("in", "out"))
    broker.create_topic(source_topic, partitions=2)
    broker.create_topic(out, partitions=1)
    send(broker.bootstrap_servers, source_topic, to_records(events, partitions=2))
    for i, e in enumerate(events):
        e["_arrival"] = (i % 2, i // 2)
    doc = make_spec(workdir, broker.bootstrap_servers, source_topic, WINDOW).to_document()
    doc["target"] = {
        "kind": "kafka",
        "topic": out,
        "bootstrap_servers": broker.bootstrap_servers,
        "format": fmt,
        "schema_registry": {"url": registry.url},
    }
    spec = PipelineSpec.model_validate(doc)
    PipelineRunner(spec, spark).run(available_now=True)

    client = SchemaRegistryClient({"url": registry.url})
    deserialize = _deserializer(fmt, client, f"{out}-value")
    context = SerializationContext(out, MessageField.VALUE)
    key = spec.natural_key()
    rows: dict[tuple, dict[str, Any]] = {}
    for value, _, _ in joins._consume(broker.bootstrap_servers, out):
        assert value[0] == 0  # Confluent-framed
        row = deserialize(value, context)
        natural = tuple(row[c] for c in key)
        assert natural not in rows
        rows[natural] = {c: v for c, v in row.items() if c not in key}
    expected = _reference(events)
    assert_same_windows(rows, expected)


@pytest.mark.parametrize(
    ("auth", "header"),
    [
        ({"basic_auth_user_info": "${REG_INFO}"}, "Basic bWU6czNjcmV0LXB3"),  # me:s3cret-pw
        (
            {"bearer_auth_token": "${REG_INFO}", "bearer_auth_logical_cluster": "lsrc-1"},
            "Bearer me:s3cret-pw",
        ),
    ],
)
def test_registry_credentials_reach_the_registry_and_never_a_message(
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    auth: dict[str, str],
    header: str,
) -> None:
    """Basic and bearer credentials from ``${ENV}``: ``validate`` passes with the right
    ones; with wrong ones it fails in one line naming the key, the credential never in it."""
    with EmbeddedSchemaRegistry(authorization=header) as guarded:
        guarded.registry.register("guarded-value", {"schema": json.dumps(V2)})
        doc = _avro_spec(workdir, "127.0.0.1:9092", "guarded", guarded.url).to_document()
        doc["sources"][0]["schema_registry"].update(auth)
        path = workdir / "guarded.toml"
        path.write_text(tomli_w.dumps(doc))
        monkeypatch.setenv("REG_INFO", "me:s3cret-pw")
        assert main(["validate", str(path)]) == 0, capsys.readouterr().err
        monkeypatch.setenv("REG_INFO", "me:wr0ng-pw")
        assert main(["validate", str(path)]) == 1
        err = capsys.readouterr().err
        assert "sources[0].schema_registry.url: the schema registry at http://" in err, err
        assert "Unauthorized" in err and "wr0ng" not in err and "s3cret" not in err
