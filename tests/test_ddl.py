"""``flow_jobs.spec.ddl`` reads a source's schema as Spark's JSON decoder does: the same
schemas accepted and refused, the same types, checked against Spark itself (the run's
``from_json``) over a corpus and over random schemas."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from flow_jobs.spec.ddl import DdlError, parse_schema

#: Each a schema whose fate (and types) Spark decides; the edges of its grammar.
CORPUS = [
    # types, their aliases and their parameters
    "a BOOLEAN, b TINYINT, c BYTE, d SMALLINT, e SHORT, f INT, g INTEGER, h BIGINT, i LONG",
    "a FLOAT, b REAL, c DOUBLE, d DATE, e TIMESTAMP, f TIMESTAMP_LTZ, g TIMESTAMP_NTZ",
    "a STRING, b BINARY, c VOID, d VARIANT, e TIME, f TIME(3), g time(0)",
    "a DECIMAL, b DECIMAL(5), c DEC(5,2), d NUMERIC(38,38), e Decimal(10, 2), f DECIMAL(0)",
    "a DECIMAL(39,2)", "a DECIMAL(5,6)", "a DECIMAL(10,2,3)", "a DECIMAL(-1)", "a DECIMAL(1.5)",
    "a INTERVAL, b INTERVAL YEAR, c INTERVAL YEAR TO MONTH, d INTERVAL DAY TO SECOND",
    "a INTERVAL HOUR TO MINUTE, b INTERVAL DAY TO HOUR, c INTERVAL MINUTE TO SECOND",
    "a INTERVAL MONTH TO YEAR", "a INTERVAL HOUR TO DAY", "a INTERVAL SECOND TO SECOND",
    "a INTERVAL YEAR TO YEAR", "a INTERVAL FOO",
    "a STRING COLLATE UTF8_LCASE, b string collate utf8_binary, c STRING COLLATE unicode",
    "a STRING COLLATE 'UTF8_LCASE'", "a ARRAY<STRING COLLATE UNICODE_CI>",
    "a MAP<STRING COLLATE UNICODE, INT>",
    # misspelt and foreign type names
    "a DOUBL", "user_id STRING, temp DOUBL, ts BIGINT", "a TEXT", "a INT64", "a JSON",
    "a UUID", "a DATETIME", "a GEOGRAPHY", "a BOOL", "a NUMBER", "a BLOB", "a STRIN",
    "a INT(3)", "a TIMESTAMP(3)", "a STRING(10)", "a TIMESTAMP WITH TIME ZONE",
    "a DOUBLE PRECISION", "a SET<INT>",
    # CHAR / VARCHAR and MAP keys: parsed by Spark, refused by its JSON decoder
    "a CHAR(3)", "a VARCHAR(10)", "a CHAR", "a CHARACTER(2)", "a ARRAY<VARCHAR(3)>",
    "a MAP<INT, STRING>", "a MAP<BINARY, INT>", "a MAP<STRING, INT>",
    # nesting
    "a STRUCT<x: INT, y ARRAY<STRING>>, b MAP<STRING, ARRAY<STRUCT<z: DECIMAL(5,2)>>>",
    "a STRUCT<>", "a ARRAY<STRUCT<>>", "a STRUCT<x: STRUCT<>>", "a ARRAY<ARRAY<ARRAY<INT>>>",
    "a ARRAY<DOUBL>", "a STRUCT<x DOUBL>", "a ARRAY", "a ARRAY<>", "a MAP", "a STRUCT",
    "a MAP<STRING>", "a MAP<STRING, INT", "a STRUCT<x: INT>>", "a STRUCT<x: INT,>",
    "a ARRAY<INT NOT NULL>", "a ARRAY(INT)", "a ARRAY<INT>(3)",
    "a STRUCT<a:INT,a:STRING>", "a STRUCT<select: INT, from: STRING>", "a STRUCT<123: INT>",
    # names: backquotes, keywords, digits, what needs quoting
    "`odd name` INT, `a,b` INT, `a``b` INT, `` INT, `a.b` INT", "``` INT", "é INT", "`é` INT",
    "a.b INT", "a-b INT", "1a INT", "123 INT", "_ INT", "select INT, from STRING, group BIGINT",
    "a BOOLEAN, a INT",
    # NOT NULL, COMMENT
    "a INT NOT NULL, b INT NOT NULL COMMENT 'c', c INT COMMENT \"d\"",
    "a STRUCT<`x y`: INT NOT NULL COMMENT 'x, y', z: STRING> NOT NULL",
    "a INT COMMENT 'it''s', b INT COMMENT 'it\\'s', c INT COMMENT 'x' 'y', d INT COMMENT r'\\d'",
    "a INT COMMENT 'c' NOT NULL", "a INT NULL", "a INT NOT", "a INT NOT NULL NOT NULL",
    "a INT COMMENT", "a INT COMMENT 3", "a INT COMMENT 'x' COMMENT 'y'", "a INT DEFAULT 1",
    # separators, colons, comments and space
    "a INT,b INT", "a\tINT\n,\nb\tBIGINT", "a INT /* c */, b INT -- x", "/* lead */ a INT",
    "a INT -- trailing", "a ARRAY< INT >, b MAP < STRING , INT >, c DECIMAL ( 10 , 2 )",
    "a: INT", "a INT, b: STRING", "a INT,", "a INT, , b INT", "a", "a INT b INT",
    "a INT; DROP", "STRUCT<a: INT>",
]  # fmt: skip


def spark_reads(spark: SparkSession, ddl: str) -> str | None:
    """The schema's type as the run's JSON decoder takes it (its ``from_json``, beside the
    corrupt-record column it adds: ``flow_jobs.plan.sources``), or None if refused."""
    with_corrupt = f"{ddl}\n, _corrupt STRING"
    try:
        frame = spark.range(0).select(F.from_json(F.lit(""), with_corrupt).alias("p"))
    except Exception:  # a ParseException or an AnalysisException
        return None
    text = frame.schema["p"].dataType.simpleString()
    assert text.endswith("_corrupt:string>"), text
    return text.removesuffix("_corrupt:string>").rstrip(",") + ">"


def we_read(ddl: str) -> str | None:
    try:
        schema = parse_schema(ddl)
    except DdlError:
        return None
    if schema.not_json:
        return None
    return "struct<" + ",".join(f"{c.name}:{c.type}" for c in schema.columns) + ">"


def random_schema(rng: random.Random) -> str:
    """A schema from Spark's grammar, with misspellings, wrong parameters and shapes."""
    names = ["a", "user_id", "`odd name`", "`x,y`", "1a", "select", "`a``b`", "ts", "_x"]
    plain = ["BOOLEAN", "TINYINT", "BYTE", "SMALLINT", "SHORT", "INT", "INTEGER", "BIGINT",
             "LONG", "FLOAT", "REAL", "DOUBLE", "DATE", "TIMESTAMP", "TIMESTAMP_LTZ",
             "TIMESTAMP_NTZ", "STRING", "BINARY", "VOID", "VARIANT", "string",
             "Double"]  # fmt: skip
    wrong = ["DOUBL", "TEXT", "INT64", "JSON", "UUID", "DATETIME", "BOOL", "NUMBER", "BLOB",
             "STRIN", "INTT", "FLOAT64", "LIST", "SET"]  # fmt: skip
    units = ["YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND"]

    def data_type(depth: int) -> str:
        x = rng.random()
        if depth < 3 and x < 0.25:
            kind = rng.choice(["ARRAY", "MAP", "STRUCT"])
            if kind == "ARRAY":
                return f"ARRAY<{data_type(depth + 1)}>"
            if kind == "MAP":
                return f"MAP<{data_type(depth + 1)}, {data_type(depth + 1)}>"
            fields = (column(depth + 1, rng.random() < 0.5) for _ in range(rng.randint(0, 3)))
            return f"STRUCT<{', '.join(fields)}>"
        if x < 0.32:
            return rng.choice(["CHAR", "VARCHAR"]) + rng.choice(["", "(3)", "(2,3)"])
        if x < 0.42:
            sizes = ["", "(10)", "(10,2)", "(38,38)", "(39,1)", "(5,6)", "(1,2,3)", "()"]
            return rng.choice(["DECIMAL", "DEC", "NUMERIC"]) + rng.choice(sizes)
        if x < 0.47:
            return "TIME" + rng.choice(["", "(3)", "(9)", "(1,2)"])
        if x < 0.55:
            tail = ["", f" {rng.choice(units)}", f" {rng.choice(units)} TO {rng.choice(units)}"]
            return "INTERVAL" + rng.choice(tail)
        if x < 0.62:
            return rng.choice(wrong)
        if x < 0.65:
            return "STRING COLLATE " + rng.choice(["UTF8_LCASE", "UNICODE", "utf8_binary"])
        return rng.choice(plain)

    def column(depth: int, colon: bool) -> str:
        text = rng.choice(names) + (":" if colon else "") + " " + data_type(depth)
        if rng.random() < 0.15:
            text += " NOT NULL"
        if rng.random() < 0.15:
            text += " COMMENT 'c, d'"
        return text

    text = ", ".join(column(0, rng.random() < 0.2) for _ in range(rng.randint(1, 4)))
    if rng.random() < 0.05:
        text += ","
    return text


def test_the_corpus_reads_as_spark_reads_it(spark: SparkSession) -> None:
    differ = [(ddl, spark_reads(spark, ddl), we_read(ddl)) for ddl in CORPUS]
    differ = [d for d in differ if d[1] != d[2]]
    assert not differ, differ
    accepted = sum(spark_reads(spark, ddl) is not None for ddl in CORPUS)
    assert 25 < accepted < len(CORPUS) - 40  # both sides of the line are covered


def test_random_schemas_read_as_spark_reads_them(spark: SparkSession) -> None:
    rng = random.Random(47)
    schemas = [random_schema(rng) for _ in range(400)]
    results = [(ddl, spark_reads(spark, ddl), we_read(ddl)) for ddl in schemas]
    differ = [r for r in results if r[1] != r[2]]
    assert not differ, differ[:5]
    accepted = sum(r[1] is not None for r in results)
    assert 40 < accepted < 360, accepted


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("user_id STRING, temp DOUBL, ts BIGINT",
         "DOUBL (column temp) is not a Spark SQL type (did you mean DOUBLE?)"),
        ("a ARRAY<TIMESTMP>",
         "TIMESTMP (column a) is not a Spark SQL type (did you mean TIMESTAMP?)"),
        ("a DECIMAL(40,2)", "DECIMAL(40, ...) (column a): the precision is at most 38"),
        ("a INT,", "expected a column name at the end (character 7)"),
        ("a: INT", 'write "a TYPE" without a colon'),
        ("my-col INT",
         "a name with other characters than letters, digits and _ goes in backquotes"),
    ],
)  # fmt: skip
def test_a_refusal_says_where_and_what_to_write(ddl: str, message: str) -> None:
    with pytest.raises(DdlError) as refused:
        parse_schema(ddl)
    assert message in str(refused.value)


def test_what_spark_parses_but_its_json_decoder_refuses_is_named() -> None:
    schema = parse_schema("a VARCHAR(3), b MAP<INT, STRING>")
    assert [c.type for c in schema.columns] == ["varchar(3)", "map<int,string>"]
    assert schema.not_json == (
        "VARCHAR(3) (column a): Spark's JSON decoder takes no CHAR or VARCHAR; declare STRING",
        "MAP<INT, ...> (column b): a JSON object's keys are strings; declare MAP<STRING, ...>",
    )
