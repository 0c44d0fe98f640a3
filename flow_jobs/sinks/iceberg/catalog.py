"""The Iceberg target's catalog and partition spec, as pyiceberg takes them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from flow_jobs.locations import is_uri
from flow_jobs.settings import Settings
from flow_jobs.sinks.iceberg.spec import PARTITION, IcebergTarget
from flow_jobs.spec.base import revealed

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


def catalog_properties(spec: IcebergTarget, store_url: str | None) -> dict[str, str]:
    """pyiceberg's ``load_catalog`` properties of the spec's catalog (secrets revealed:
    for the client only)."""
    catalog = spec.catalog
    props = {"type": catalog.kind, **revealed(catalog.properties)}
    if catalog.uri is not None:
        props["uri"] = catalog.uri.get_secret_value()
    elif store_url is not None:
        props["uri"] = sqlalchemy_url(store_url)
    warehouse = catalog.warehouse
    if warehouse is None and catalog.kind == "sql":
        warehouse = str(Settings.from_env().data_dir / "iceberg")
    if warehouse is not None:
        props["warehouse"] = warehouse if is_uri(warehouse) else Path(warehouse).resolve().as_uri()
    return props


def sqlalchemy_url(url: str) -> str:
    """A libpq URL (the state store's) as SQLAlchemy's, through psycopg 3."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url.removeprefix(scheme)
    return url


def load(spec: IcebergTarget, store_url: str | None) -> Catalog:
    from pyiceberg.catalog import load_catalog
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    properties = catalog_properties(spec, store_url)
    try:
        return load_catalog(spec.catalog.name, **properties)
    except (IntegrityError, ProgrammingError):
        # A SQL catalog creates its two tables when it first opens a database; two
        # runs doing so at once collide in Postgres' catalog, and the loser finds them
        # on a second try.
        return load_catalog(spec.catalog.name, **properties)


def partition_field(entry: str) -> tuple[str, Any, str]:
    """A ``partition_by`` entry as (source column, pyiceberg transform, field name)."""
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )

    found = PARTITION.match(entry)
    assert found is not None, entry  # the spec checked it
    if found["plain"]:
        return found["plain"], IdentityTransform(), found["plain"]
    if found["unary"]:
        name = found["unary"].rstrip("s")
        unary = {
            "identity": IdentityTransform,
            "year": YearTransform,
            "month": MonthTransform,
            "day": DayTransform,
            "hour": HourTransform,
        }[name]
        column = found["column"]
        return column, unary(), column if name == "identity" else f"{column}_{name}"
    n, column = int(found["n"]), found["column2"]
    binary = BucketTransform(n) if found["binary"] == "bucket" else TruncateTransform(n)
    return column, binary, f"{column}_{found['binary']}"
