# Everything runs from the project's own virtualenv; `make setup` builds it once (again when pyproject.toml changes).
VENV ?= .venv
PY := $(VENV)/bin/python
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: setup test lint typecheck unit demo sql sql-check bench bench-quick bench-claims bench-pauses bench-history bench-dashboard bench-txn bench-limits bench-totals soak soak-limits differential deps clean

setup: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

## The test command: lint, types, then every suite against a real MySQL server
## (PLITZI_MYSQL_URL, a container where Docker answers, or a throwaway local mariadbd/mysqld), in TEST_WORKERS
## processes (pytest-xdist; each starts its own throwaway servers; a module that starts a cluster, a browser or a
## wheel build runs whole in one of them: --dist loadgroup and the modules' xdist_group marks).
TEST_WORKERS ?= 2
test: setup lint typecheck sql-check
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=30

lint: setup
	$(PY) -m ruff check src tests bench scripts examples
	$(PY) -m ruff format --check src tests bench scripts examples

typecheck: setup
	$(PY) -m mypy

## The main job: two replica processes sharing MySQL, one killed mid-job, the jobs moving live.
demo: setup
	$(PY) examples/demo.py

## sql/schema.sql and sql/upgrades.sql are generated from the package, never edited by hand.
sql: setup
	$(PY) scripts/gen_sql.py

sql-check: setup
	$(PY) scripts/gen_sql.py --check

## The lowest and the highest dependency versions pyproject.toml allows, each in a fresh virtualenv, running the
## contract suites (memory, and MySQL over one pool setup). About 1.5 minutes; .ci/run runs it after `make test`.
deps: setup
	$(PY) scripts/deps_matrix.py

bench: setup
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py
	$(PY) bench/priorities.py
	$(PY) bench/pauses.py
	$(PY) bench/history.py --sizes 1000,110000
	$(PY) bench/limits.py
	$(PY) bench/totals_cost.py --floor

## Claims with priorities (issue 20.2): claim cost at 100,000 due jobs over 5 priorities vs 1,000, and a drain with
## mixed priorities vs one (bench/priorities.py; PLITZI_MYSQL_URL, else a throwaway server).
bench-claims: setup
	$(PY) bench/priorities.py

## Fleet-wide limits (issue 21.4): their cost on a drain, claims beside a saturated action, utilisation; ratios.
bench-limits: setup
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/limits.py

bench-quick: setup
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py --quick

bench-pauses: setup
	$(PY) bench/pauses.py

## Pickup latency of a job enqueued inside the caller's transaction (issue 20.1), with and without announce_due().
bench-txn: setup
	$(PY) bench/txn_pickup.py

## Operator reads as history grows (issue 24): 1,000 vs 1,100,000 jobs, old statements vs new, side by side;
## make bench-history HISTORY_ARGS=--big adds 10,100,000 (a quiet machine only).
bench-history: setup
	$(PY) bench/history.py $(HISTORY_ARGS)

## What the job totals' triggers cost the write path (issue 24.1): enqueue, enqueue_many, drains, with and without
## them and beside the two sides that show a trigger design's floor; TOTALS_ARGS=--mysql97 on MySQL 9.7.
bench-totals: setup
	$(PY) bench/totals_cost.py --floor $(TOTALS_ARGS)

## The dashboard's pages with 1,000,000 finished + 100,000 waiting jobs (issue 22.4): server time per page.
bench-dashboard: setup
	$(PY) bench/dashboard.py

## make soak [SECONDS=120]; a fault run instead: make soak FAULT=proxy|kill|read-only|silent|galera|group-replication
## [JOBS=10000]
## (on throwaway servers only; tests/harness/injectors.py says what each does)
SECONDS ?= 120
FAULT ?=
JOBS ?=
soak: setup
	$(PY) -m tests.harness.soak --seconds $(SECONDS) $(if $(FAULT),--fault $(FAULT)) $(if $(JOBS),--jobs $(JOBS))

## Fleet-wide limits across 4 replica processes x 8 handlers (a limit of 3) and x 12 (a roomy 36, whose slots
## start as reservations), SIGKILLs and proxy cuts included (issue 21.3): make soak-limits [JOBS=5000] jobs of the
## limited action (3x that for the roomy one) beside as many of an unlimited one (`make test` runs 240)
soak-limits: setup
	PLITZI_LIMITS_JOBS=$(or $(JOBS),5000) $(PY) -m pytest -q -s tests/faults/test_limits_fleet.py

## The memory stores and the MySQL stores driven by one random sequence of operations each, every answer and the
## state compared: make differential [SEEDS=50] [OPS=1000] (about 6 minutes; `make test` runs 3 seeds of 300);
## a failure prints its seed (PLITZI_DIFFERENTIAL_SEED=n replays it) and a shrunk sequence.
SEEDS ?= 50
OPS ?= 1000
differential: setup
	PLITZI_DIFFERENTIAL_SEEDS=$(SEEDS) PLITZI_DIFFERENTIAL_OPS=$(OPS) $(PY) -m pytest -q tests/mysql/test_differential.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info
