"""The driver JVM's classes from an archive: what a run's JVM loads once per machine.

A driver JVM loads, parses and verifies several thousand classes from Spark's jars
before its first query, the same ones on every run, and that is most of the CPU a run
spends before its first record (BENCHMARKS.md, "The driver's classes from an archive").
Java's application class-data sharing (JEP 350) keeps those classes parsed and verified
in a file the next JVM maps. So the first run on a machine (for one JDK and one Spark)
starts its JVM with ``-XX:ArchiveClassesAtExit``, which writes the classes it loaded as
the JVM exits, after the run's own output; every later run maps that archive
(``-XX:SharedArchiveFile``). A JVM whose JDK or class path differs from the archive's
maps nothing and loads its classes as it would without one (``-Xshare:auto``, Java's
default): the archive changes how fast a JVM starts, never what a query computes.

``FLOW_JOBS_CLASS_ARCHIVE`` (``Settings.class_archive``) chooses the folder (default:
``$XDG_CACHE_HOME/flow-jobs/jvm`` or ``~/.cache/flow-jobs/jvm``), or ``off``. Nothing is
done where the JVM's options name class-data sharing already (``SPARK_SUBMIT_OPTS``,
``JAVA_TOOL_OPTIONS``, ``spark.driver.extraJavaOptions``): the user's own archive wins.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

#: The first bytes of a finished archive: HotSpot writes the header (its magic,
#: ``CDS_DYNAMIC_ARCHIVE_MAGIC`` 0xf00baba8, little-endian here) after every region, so
#: a file without it is a JVM still writing, or one killed while it wrote.
DYNAMIC_MAGIC = bytes.fromhex("a8ab0bf0")
#: An unfinished dump this old is a JVM killed while it wrote (dumping takes seconds).
STALE_DUMP_S = 600
#: Java's CDS notes (a signed jar's classes are left out, a class path that differs)
#: would go to stdout, where a run's own output goes.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: Options by which the user chose class-data sharing themselves.
USERS_OWN = ("SharedArchiveFile", "ArchiveClassesAtExit", "Xshare", "AutoCreateSharedArchive")
JAVA_OPTION_VARIABLES = ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")


def folder(chosen: str | None, env: Mapping[str, str]) -> Path | None:
    """Where archives are kept (``chosen``: the setting), or None when it is ``off``."""
    chosen = (chosen or "").strip()
    if chosen.lower() in ("off", "false", "0", "no"):
        return None
    if chosen:
        return Path(chosen).expanduser()
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "flow-jobs" / "jvm"


def _java(env: Mapping[str, str]) -> str:
    """The java that Spark's launcher starts (``$JAVA_HOME/bin/java``, else PATH's)."""
    home = env.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java") or "java"
    return os.path.realpath(found)


def archive_name(env: Mapping[str, str], settings: Mapping[str, str]) -> str:
    """One name per JDK, Spark install and class path: a JVM maps an archive only when
    all three are the ones it was written with."""
    import pyspark

    java = _java(env)
    jars = Path(env.get("SPARK_HOME") or Path(pyspark.__file__).parent) / "jars"
    parts = [java, str(_stat(Path(java))), str(jars.resolve())]
    if jars.is_dir():
        parts += sorted(f"{p.name}:{_stat(p)}" for p in jars.iterdir())
    parts += [settings.get(k, "") for k in ("spark.driver.extraClassPath", "spark.jars")]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return f"spark-{pyspark.__version__}-{digest}"


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_size, st.st_mtime_ns)


def _has_base_archive(env: Mapping[str, str]) -> bool:
    """Whether the JDK ships its own classes' archive (``lib/server/classes*.jsa``), on
    which an application's archive is layered: a JDK without one (a jlink image, some
    minimal builds) would print a warning on stdout for ``-XX:ArchiveClassesAtExit``."""
    server = Path(_java(env)).parent.parent / "lib" / "server"
    return any(server.glob("classes*.jsa"))


def _chosen_by_user(env: Mapping[str, str], settings: Mapping[str, str]) -> bool:
    given = [env.get(v, "") for v in JAVA_OPTION_VARIABLES]
    given.append(settings.get("spark.driver.extraJavaOptions", ""))
    return any(option in text for text in given for option in USERS_OWN)


def java_options(chosen: str | None, env: Mapping[str, str], settings: Mapping[str, str]) -> str:
    """The driver JVM's class-data sharing options (``chosen``: the setting; ``env``:
    the process's environment; ``settings``: the session's Spark settings): map the
    archive where there is one, else write it at exit; ``""`` where it is off, chosen by
    the user, or the folder cannot be written."""
    if _chosen_by_user(env, settings) or not _has_base_archive(env):
        return ""
    try:
        where = folder(chosen, env)
        if where is None:
            return ""
        name = archive_name(env, settings)
        archive = where / f"{name}.jsa"
        if archive.is_file() or _promote(where, name, archive):
            return f"-XX:SharedArchiveFile={archive} {QUIET}"
        where.mkdir(parents=True, exist_ok=True)
        if not os.access(where, os.W_OK):
            return ""
    except (OSError, RuntimeError) as e:  # no home, a cache not ours: no reason to fail
        log.debug("no class archive: %s", e)
        return ""
    # A name of its own: runs that start at once each write theirs; the first finished
    # one becomes the archive (``_promote``), a later one replaces it, equal in use.
    dump = where / f"{name}.{os.getpid()}-{secrets.token_hex(4)}.dump"
    return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"


def _promote(where: Path, name: str, archive: Path) -> bool:
    """Make a finished dump the archive; remove the dumps of JVMs killed while they
    wrote. Whether there is an archive now."""
    promoted = False
    for dump in where.glob(f"{name}.*.dump"):
        try:
            with dump.open("rb") as f:
                finished = f.read(len(DYNAMIC_MAGIC)) == DYNAMIC_MAGIC
            if finished:
                os.replace(dump, archive)
                promoted = True
            elif time.time() - dump.stat().st_mtime > STALE_DUMP_S:
                dump.unlink()
        except OSError:  # another run promoted or removed it first
            continue
    return promoted or archive.is_file()
