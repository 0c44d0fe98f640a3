"""The driver JVM's classes from an archive (``flow_jobs.runtime.class_archive``): the
first run on a machine writes it as its JVM exits, later runs map it; nothing where the
user chose class-data sharing, or turned it off."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flow_jobs.runtime import class_archive
from flow_jobs.runtime.class_archive import DYNAMIC_MAGIC, java_options
from flow_jobs.settings import Settings

ROOT = Path(__file__).parent.parent


def _env(**more: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], **more}


def test_off_or_chosen_by_the_user_adds_nothing(tmp_path: Path) -> None:
    assert java_options("off", _env(), {}) == ""
    own = "-XX:SharedArchiveFile=/opt/mine.jsa"
    chosen = str(tmp_path)
    assert java_options(chosen, _env(SPARK_SUBMIT_OPTS=own), {}) == ""
    assert java_options(chosen, _env(JAVA_TOOL_OPTIONS="-Xshare:off"), {}) == ""
    assert java_options(chosen, _env(), {"spark.driver.extraJavaOptions": own}) == ""
    jdk = tmp_path / "jdk"  # a JDK without its own classes' archive (a jlink image)
    (jdk / "bin").mkdir(parents=True)
    (jdk / "lib" / "server").mkdir(parents=True)
    assert java_options(chosen, _env(JAVA_HOME=str(jdk)), {}) == ""
    assert list(tmp_path.iterdir()) == [jdk]
    (jdk / "lib" / "server" / "classes.jsa").write_bytes(b"")
    assert java_options(chosen, _env(JAVA_HOME=str(jdk)), {}).startswith("-XX:ArchiveClasses")


def test_the_default_folder_is_the_users_cache(tmp_path: Path) -> None:
    cache = {"XDG_CACHE_HOME": str(tmp_path)}
    assert class_archive.folder(None, cache) == tmp_path / "flow-jobs/jvm"
    assert class_archive.folder(None, {}) == Path.home() / ".cache/flow-jobs/jvm"
    assert class_archive.folder("~/jvm", cache) == Path.home() / "jvm"
    assert Settings.from_env({"FLOW_JOBS_CLASS_ARCHIVE": "off"}).class_archive == "off"


def test_a_first_run_writes_a_dump_of_its_own_and_a_finished_one_becomes_the_archive(
    tmp_path: Path,
) -> None:
    env, chosen = _env(), str(tmp_path / "jvm")

    def options() -> str:
        return java_options(chosen, env, {})

    first, second = options(), options()
    assert first.startswith("-XX:ArchiveClassesAtExit=") and "-Xlog:cds=off" in first
    dumps = [o.split("=", 1)[1] for o in (first.split()[0], second.split()[0])]
    assert dumps[0] != dumps[1]  # two runs at once write two files
    name = class_archive.archive_name(env, {})
    assert all(Path(d).parent == tmp_path / "jvm" and Path(d).name.startswith(name) for d in dumps)

    # a JVM still writing (HotSpot writes the header, and its magic, last)
    Path(dumps[0]).write_bytes(b"\0" * 64)
    assert options().startswith("-XX:ArchiveClassesAtExit=")
    assert Path(dumps[0]).exists()
    # one killed while it wrote, long ago: removed
    old = time.time() - class_archive.STALE_DUMP_S - 1
    os.utime(dumps[0], (old, old))
    options()
    assert not Path(dumps[0]).exists()
    # a finished one: the archive from now on
    Path(dumps[1]).write_bytes(DYNAMIC_MAGIC + b"\1" * 60)
    archive = tmp_path / "jvm" / f"{name}.jsa"
    assert options() == f"-XX:SharedArchiveFile={archive} {class_archive.QUIET}"
    assert archive.read_bytes().startswith(DYNAMIC_MAGIC) and not Path(dumps[1]).exists()
    assert options().startswith(f"-XX:SharedArchiveFile={archive} ")


def test_an_archive_is_named_by_its_jdk_spark_install_and_class_path(tmp_path: Path) -> None:
    env = _env()
    name = class_archive.archive_name(env, {})
    assert class_archive.archive_name(env, {}) == name
    assert class_archive.archive_name(env, {"spark.jars": "/opt/extra.jar"}) != name
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "spark-core.jar").write_bytes(b"x")
    assert class_archive.archive_name({**env, "SPARK_HOME": str(home)}, {}) != name


PROBE = """
import sys
from flow_jobs.runtime.session import build_spark_session
from pyspark import SparkContext
spark = build_spark_session("local[1]", {"spark.ui.enabled": "false"})
jvm = SparkContext._gateway.proc.pid
rows = spark.range(100).selectExpr("id % 3 AS k").groupBy("k").count().collect()
maps = open(f"/proc/{jvm}/maps").read()
print(jvm, sorted((r.k, r["count"]) for r in rows), sys.argv[1] in maps, flush=True)
"""


@pytest.mark.spark
def test_the_next_driver_jvm_maps_the_archive_the_first_one_wrote(tmp_path: Path) -> None:
    """Real JVMs: the first driver writes the archive as it exits, the second maps it
    and computes the same."""
    folder = tmp_path / "jvm"
    # the suite's own JVM options, without the suite's own archive
    from tests.jvm_classes import JVM_OPTIONS

    env = {
        **os.environ,
        "FLOW_JOBS_CLASS_ARCHIVE": str(folder),
        "SPARK_SUBMIT_OPTS": JVM_OPTIONS,
        "PYTHONPATH": str(ROOT),
    }
    expected = "[(0, 34), (1, 33), (2, 33)]"

    def run() -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(folder)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=True,
        )
        assert "Xshare" not in done.stdout + done.stderr and "CDS" not in done.stderr
        jvm, rest = done.stdout.strip().split(" ", 1)
        return int(jvm), rest

    jvm, first = run()
    assert first == f"{expected} False"
    deadline = time.monotonic() + 120
    while Path(f"/proc/{jvm}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # the JVM dumps its classes as it exits, after the run's process
    dumps = list(folder.glob("*.dump"))
    assert len(dumps) == 1 and dumps[0].read_bytes()[:4] == DYNAMIC_MAGIC

    _jvm, second = run()
    assert second == f"{expected} True"
    assert [p.suffix for p in folder.iterdir()] == [".jsa"]
