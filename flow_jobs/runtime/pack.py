"""``flow-jobs pack``: the Python environment a cluster's executors run (issue 14).

A Spark cluster's executors run flow-jobs' code (the Kafka reader, the JSON decoder,
the dead-letter tap, the state-API window operators) in Python workers, with pyarrow,
numpy, pandas, confluent-kafka and datasketches. PySpark documents shipping them as a
packed virtual environment through ``spark.archives`` (Python Package Management:
venv-pack); that is what this builds:

1. a new virtual environment from this interpreter's base Python;
2. the executor-side distributions installed with pip, each pinned to the version this
   driver runs (the two sides exchange Arrow batches and pickles);
3. this flow_jobs package copied in as the driver runs it (an editable install cannot
   be packed, and a copy is exactly the driver's code), with any ``include`` paths
   (modules holding a spec's ``reduce`` functions, say);
4. ``venv_pack.pack`` into one archive.

PySpark comes from the workers' own Spark (its ``python/lib`` on their PYTHONPATH), not
from the archive. As venv-pack says, the archive links to the base interpreter rather
than carrying it: every worker needs the same Python (same version, same path) as the
machine that packed it.

The driver names the archive with ``[spark] archive`` (or ``FLOW_JOBS_SPARK_ARCHIVE``);
``flow_jobs.runtime.session`` turns it into ``spark.archives`` and points the executors'
Python at it.
"""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

#: The distributions executors import (flow_jobs' executor-side modules and PySpark's
#: Arrow workers); their dependencies come with them, pinned like the driver's.
EXECUTOR_DISTRIBUTIONS = (
    "pyarrow",
    "numpy",
    "pandas",
    "confluent-kafka",
    "datasketches",
    "pydantic",
    "tomli-w",
    # PySpark's state API (sliding and count windows) speaks protobuf with the JVM
    "protobuf",
    # [[lookups]]: executors read a Delta table or a Postgres query
    "deltalake",
    "psycopg",
    "psycopg-binary",
)
#: Where executors unpack the archive, relative to their working directory.
ARCHIVE_ALIAS = "flowenv"
#: The Python that Spark starts for flow-jobs' workers, by name: found through PATH, in
#: the archive's ``bin`` on an executor and beside this interpreter on the driver
#: (``flow_jobs.runtime.session``).
PYTHON_NAME = "flow-jobs-python"
DEFAULT_ARCHIVE = "dist/flow-jobs-executor.tar.gz"


def _pins() -> list[str]:
    return [f"{name}=={importlib.metadata.version(name)}" for name in EXECUTOR_DISTRIBUTIONS]


def _constraints() -> str:
    """Every distribution this driver has, as pip constraints: dependencies resolve to
    the driver's versions too (constraints on what is not installed are ignored)."""
    seen: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() not in ("flow-jobs", "pip", "setuptools"):
            seen.setdefault(name.lower(), dist.version)
    return "".join(f"{name}=={version}\n" for name, version in sorted(seen.items()))


def _installer(python: Path) -> list[str]:
    """uv where this environment has it (``make`` installs it: several times faster),
    else the new venv's own pip; both take the same pins and constraints."""
    uv = Path(sys.executable).parent / "uv"
    if uv.exists():  # with the bytecode pip writes by default (each executor's worker
        # would compile what it imports from source where none may be written)
        return [str(uv), "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python)]
    return [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def pack(
    output: str | Path = DEFAULT_ARCHIVE,
    include: Sequence[str | Path] = (),
    compress_level: int = 4,
) -> Path:
    """Build the executors' archive at ``output`` (``.tar.gz``, ``.tgz``, ``.tar`` or
    ``.zip``); return its path."""
    import venv_pack

    out = Path(output).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    package = Path(__file__).resolve().parent.parent  # flow_jobs/
    base_python = Path(sys._base_executable).resolve()  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="flow-jobs-pack-") as tmp:
        env = Path(tmp) / "env"
        subprocess.run([str(base_python), "-m", "venv", str(env)], check=True)
        python = env / "bin" / "python"
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(_constraints())
        log.info("pack: installing %s", " ".join(_pins()))
        subprocess.run([*_installer(python), "-c", str(constraints), *_pins()], check=True)
        site = Path(
            subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(package, site / package.name, ignore=ignore)
        for extra in map(Path, include):
            if extra.is_dir():
                shutil.copytree(extra, site / extra.name, ignore=ignore)
            elif extra.is_file():
                shutil.copy2(extra, site / extra.name)
            else:
                raise FileNotFoundError(f"flow-jobs pack --include {extra}: no such file")
        (env / "bin" / PYTHON_NAME).symlink_to("python")
        venv_pack.pack(
            prefix=str(env),
            output=str(out),
            force=True,
            compress_level=compress_level,
            verbose=False,
        )
    log.info(
        "pack: %s (%.0f MB), Python %s",
        out,
        out.stat().st_size / 1e6,
        sysconfig.get_python_version(),
    )
    return out
