"""Where a location points: the one rule for "is it a URI?" and "is it local?".

A location (a checkpoint, a Delta table, a lookup's path) is a plain path (``/data/x``,
``./x``) or a URI (``file:///data/x``, ``s3a://bucket/x``, ``hdfs://...``, ``abfss://...``).
A plain path or a ``file://`` URI is local: this process opens it directly. Any other URI
is reached through Hadoop's ``FileSystem`` (a checkpoint) or an object store (a Delta
table, through delta-rs).
"""

from __future__ import annotations

import re

#: A location with a URI scheme (``s3://``, ``gs://``, ``az://``, ``file://``...).
URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_FILE = "file://"


def is_uri(location: str) -> bool:
    """A location with a scheme, ``file://`` included; a plain path is not."""
    return URI_SCHEME.match(location) is not None


def local_path(location: str) -> str | None:
    """The path this process opens for a local location (a plain path as written, a
    ``file://`` URI without its scheme); None for any other URI."""
    if not is_uri(location):
        return location
    if location[: len(_FILE)].lower() == _FILE:
        return location[len(_FILE) :]
    return None


def on_object_store(location: str) -> bool:
    """A location that is not local: a Delta table delta-rs reaches through an object
    store (``s3://bucket/...``, ``gs://``, ``az://``, ``abfss://``...), a checkpoint
    behind Hadoop's ``FileSystem``."""
    return local_path(location) is None
