"""``[transform.mirror]``: a target table kept equal to a table whose changes a Debezium
source reads, by its primary key: a created, read (snapshot) or updated row upserted,
a deleted one deleted, exactly once per batch.

* ``spec``: its keys (``MirrorSpec``);
* ``compile``: the plan (``compile_mirror_pipeline``);
* ``step``: each batch's last change per key (``MirrorStep``, a batch step);
* ``plugin``: what ``flow_jobs.plugins.BUILTIN`` imports, registering them under
  ``"mirror"`` (``MirrorSpec.STAGE``).
"""
