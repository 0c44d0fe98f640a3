# flow-jobs: every target creates .venv/ on first use and installs into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Quix Streams, for tests/test_quix_compare.py only: its pins conflict with the project's.
QUIX_VENV := .venv-quix
QUIX_STAMP := $(QUIX_VENV)/.stamp
# Spark's classes, parsed and verified once for every JVM of the suite (tests/jvm_classes.py)
CLASS_ARCHIVE := $(VENV)/spark-classes.jsa
# pip-tools, for `make lock` only: not one of the project's dependencies.
LOCK_VENV := .venv-lock
LOCK_STAMP := $(LOCK_VENV)/.stamp
PIP_TOOLS := pip-tools==7.6.2
# the installer of both venvs (only pip itself comes with a new venv)
UV := uv==0.13.8
# the project's own Python: linted, and compiled to bytecode before the suite (the
# editable install leaves it to each process otherwise; see $(STAMP))
SOURCES := flow_jobs flow_jobs_dev assets tests bench definitions.py

.PHONY: demo broker produce test ci soak soak-long bench bench-compare bench-nexmark bench-state bench-latency bench-batch pack lint validate lock clean

# Every dependency (the extras dev and demo included) at the version and hashes of
# requirements.lock, then this project, editable, without resolving anything again.
# uv installs them (from the same registry, by the same hashes): several times faster
# than pip, which is most of a clean clone's `make test` before the suite starts.
# --compile-bytecode writes every module's .pyc at install: uv does not by default, and
# where PYTHONDONTWRITEBYTECODE is set (as on the CI machines) no process ever writes
# one, so each new Python process (Spark starts one per query to plan the Kafka source,
# and its workers) compiled PySpark, pandas and pyarrow from source again
# (BENCHMARKS.md, "How long make test takes").
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet '$(UV)'
	$(VENV)/bin/uv pip install --quiet --python $(PY) --require-hashes --compile-bytecode \
		-r requirements.lock
	$(VENV)/bin/uv pip install --quiet --python $(PY) --no-deps -e .
	touch $(STAMP)

$(LOCK_STAMP):
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet '$(PIP_TOOLS)'
	touch $(LOCK_STAMP)

$(QUIX_STAMP): tests/quix/requirements.txt
	$(PYTHON) -m venv $(QUIX_VENV)
	$(QUIX_VENV)/bin/python -m pip install --quiet '$(UV)'
	$(QUIX_VENV)/bin/uv pip install --quiet --python $(QUIX_VENV)/bin/python --compile-bytecode \
		-r tests/quix/requirements.txt
	touch $(QUIX_STAMP)

## demo: start an embedded broker, produce sample clicks, run pipelines/clicks_per_minute.toml, print the windows (UI=1: then serve the Dagster UI on :3000)
demo: $(STAMP)
	$(PY) -m flow_jobs_dev.demo $(if $(UI),--ui,) $(DEMO_ARGS)

## broker: the embedded Kafka-protocol broker on its own, until Ctrl-C (PORT=9092), to try your own events
broker: $(STAMP)
	$(PY) -m flow_jobs_dev.broker $(if $(PORT),--port $(PORT),)

## produce: send a JSON-lines file to a topic, a record per line (FILE=, TOPIC=; BROKER=127.0.0.1:9092, PARTITIONS=2, KEY=field)
produce: $(STAMP)
	$(PY) -m flow_jobs_dev.produce "$(FILE)" --topic "$(TOPIC)" \
		$(if $(BROKER),--bootstrap-servers $(BROKER),) $(if $(PARTITIONS),--partitions $(PARTITIONS),) \
		$(if $(KEY),--key $(KEY),)

## lock: regenerate requirements.lock (hashed) from pyproject.toml's ranges, keeping the versions it holds (UPGRADE=name moves one package)
# (flow-jobs itself appears at its end as a commented "not pinned" warning: the dev
# extra names flow-jobs[demo]; make installs the project apart, with --no-deps.)
lock: $(LOCK_STAMP)
	$(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --strip-extras \
		--no-emit-index-url --no-emit-find-links --unsafe-package flow-jobs \
		--extra dev --extra demo $(if $(UPGRADE),--upgrade-package $(UPGRADE),) \
		-o requirements.lock pyproject.toml

## test: the whole suite (real Kafka-protocol broker, Spark, Delta), two test files at a time (WORKERS=2)
test: $(STAMP) $(QUIX_STAMP) $(CLASS_ARCHIVE)
	$(PY) -m compileall -q -j0 $(SOURCES)
	$(PY) -m pytest -n $(or $(WORKERS),2) --dist loadfile --no-loadscope-reorder

# The suite's JVMs map Spark's classes from this archive instead of loading them each
# (tests/jvm_classes.py); rebuilt with the packages.
$(CLASS_ARCHIVE): $(STAMP) tests/jvm_classes.py
	$(PY) -m tests.jvm_classes $@

## ci: what CI runs (.ci/run): lint, then the whole suite
ci: lint test

## soak: the crash-recovery test with more SIGKILLs (KILLS=50 by default)
soak: $(STAMP)
	FLOW_CRASH_KILLS=$(or $(KILLS),50) $(PY) -m pytest tests/test_crash_recovery.py -x

## soak-long: the main job for an hour at half its measured peak rate, with a broker restart, a Postgres restart and a kill -9 on a schedule; a CSV and a plot each minute into .soak/ (RATE=events/s skips the peak, MINUTES=60)
soak-long: $(STAMP)
	$(PY) -m bench.soak $(if $(RATE),--rate $(RATE),) $(if $(MINUTES),--minutes $(MINUTES),)

## bench: end-to-end events/s against a bare confluent-kafka read (N=2000000 by default)
bench: $(STAMP)
	$(PY) -m bench.run $(if $(N),--events $(N),)

## bench-compare: flow-jobs vs the same jobs hand-written in PySpark (the joins on its default state store and on RocksDB; each its own process, then one warm JVM) and in Quix Streams, one topic (N=2000000)
bench-compare: $(STAMP) $(QUIX_STAMP)
	$(PY) -m bench.compare $(if $(N),--events $(N),)

## bench-nexmark: the Nexmark queries flow-jobs expresses (q0-q2, q5, q7, q8, q11, q14, q21, q22), each a fresh process, outputs checked against their definitions, per core beside Flink's published figures (N=1000000 events)
bench-nexmark: $(STAMP)
	$(PY) -m bench.nexmark.run $(if $(N),--events $(N),)

## bench-inserts: a join's Delta inserts written by the driver and by the executors on a 2-worker standalone cluster (driver CPU and peak memory per row, events/s; ORDERS=300000)
bench-inserts: $(STAMP)
	$(PY) -m bench.executor_inserts $(if $(ORDERS),--orders $(ORDERS),)

## bench-state: state at scale, 1k / 100k / 1M keys in one window (keys -> events/s -> peak state -> RSS)
bench-state: $(STAMP)
	$(PY) -m bench.state_scale $(if $(KEYS),--keys $(KEYS),)

## bench-latency: event-to-target p50/p95/p99 and per-batch time of a continuous run, flow-jobs vs hand-written PySpark (RATE=1000 events/s, DURATION=120 s, EMIT=current|final|current,final, JSON=path)
bench-latency: $(STAMP)
	$(PY) -m bench.latency $(if $(RATE),--rate $(RATE),) $(if $(DURATION),--duration $(DURATION),) \
		$(if $(EMIT),--emit $(EMIT),) $(if $(JSON),--json $(JSON),)

## bench-batch: where a 100-record micro-batch's time goes, phase by phase, flow-jobs vs hand-written PySpark in one process
bench-batch: $(STAMP)
	$(PY) -m bench.profile_batch $(if $(JSON),--json $(JSON),)

## pack: the executors' Python environment for a cluster (dist/flow-jobs-executor.tar.gz)
pack: $(STAMP)
	$(VENV)/bin/flow-jobs pack

## lint: ruff check and ruff format --check (part of make ci)
lint: $(STAMP)
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)
	$(VENV)/bin/lint-imports

validate: $(STAMP)
	for f in $(wildcard pipelines/*.toml pipelines/*.sql); do $(VENV)/bin/flow-jobs validate $$f || exit 1; done

clean:
	rm -rf $(VENV) $(QUIX_VENV) $(LOCK_VENV) .demo .pytest_cache spark-warehouse dist
