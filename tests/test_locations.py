"""The one rule for where a location points (``flow_jobs.locations``): a plain
path or a ``file://`` URI is local, any other URI is not."""

from __future__ import annotations

import pytest

from flow_jobs.locations import is_uri, local_path, on_object_store

CASES = [
    # location, is a URI, the local path (None: not local)
    ("/data/checkpoints/clicks", False, "/data/checkpoints/clicks"),
    ("./checkpoints/clicks", False, "./checkpoints/clicks"),
    ("checkpoints/a://b", False, "checkpoints/a://b"),  # "://" inside a path: no scheme
    ("file:///mnt/shared/clicks", True, "/mnt/shared/clicks"),
    ("FILE:///mnt/shared/clicks", True, "/mnt/shared/clicks"),  # schemes ignore case
    ("s3a://bucket/checkpoints", True, None),
    ("s3://bucket/table", True, None),
    ("abfss://c@account.dfs.core.windows.net/x", True, None),
    ("hdfs://namenode:8020/x", True, None),
]


@pytest.mark.parametrize(("location", "uri", "local"), CASES)
def test_a_location_is_local_or_behind_a_uri(location: str, uri: bool, local: str | None) -> None:
    assert is_uri(location) is uri
    assert local_path(location) == local
    assert on_object_store(location) is (local is None)
