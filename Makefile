# floe: the two user commands are `make demo` and `make test`; the rest are helpers.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The suite's groups run side by side in this many processes (tests/groups.py); 0: serially.
WORKERS ?= 3

.PHONY: demo test lint venv prereqs crds stack-up stack-down stack-status stack-env clean \
	nemesis bench bench-backlog bench-restart bench-upsert

demo: venv
	$(PY) -m hack.demo

# Provisioning (stdlib only) runs beside pip: on a fresh machine both take minutes.
test: prereqs
	@mkdir -p reports
	@$(PYTHON) -m hack.stack provision & provision=$$!; \
	  $(MAKE) --no-print-directory $(VENV)/.installed; installed=$$?; \
	  wait $$provision; provisioned=$$?; \
	  test $$installed -eq 0 && test $$provisioned -eq 0
	@$(MAKE) --no-print-directory lint
	$(PY) -m pytest -n $(WORKERS) --dist loadgroup $(PYTEST_ARGS) --junitxml=reports/junit.xml

# The linter, the formatter's check and the type checker (pyproject.toml): the venv alone, no
# stack and no toolchains.
lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

venv: prereqs $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[operator,job,test]'
	@touch $@

prereqs:
	@bash hack/prereqs.sh

crds: venv
	$(PY) -m floe_operator.crd floe.dev_kafkaicebergtopics.yaml > crds/floe.dev_kafkaicebergtopics.yaml
	$(PY) -m floe_operator.crd floe.dev_kafkaicebergoperations.yaml > crds/floe.dev_kafkaicebergoperations.yaml
	cp crds/*.yaml charts/floe-operator/crds/

stack-up: venv
	$(PY) -m hack.stack up

stack-down: venv
	$(PY) -m hack.stack down

stack-status: venv
	$(PY) -m hack.stack status

stack-env: venv
	@$(PY) -m hack.stack env

# The nemesis for as long as asked: every catalog and mode (routed: three tables, routing changes
# and operations beside the job), faults between the job and each
# neighbour; each run's result is added to bench/results/nemesis.jsonl.
SECONDS ?= 1800
SEED ?= 1
CATALOGS ?= sqlite,postgresql,rest
MODES ?= append,upsert,routed
nemesis: venv
	$(PY) -m tests.integration.nemesis --seconds $(SECONDS) --seed $(SEED) \
	  --catalog $(CATALOGS) --mode $(MODES) --record bench/results/nemesis.jsonl

# The benchmarks against their baselines (bench/README.md); each records its results under
# bench/results/ and its table in bench/README.md.  `bench`: ingestion, freshness and the
# operator at scale (about an hour and a half); `bench-backlog`: 50,000,000 records of ~100 B
# and 10,000,000 of ~1 KB caught up by floe, the Kafka Connect sink and Spark's Parquet sink
# (about 45 minutes); `bench-restart`: a job's restart on the node to its first commit;
# `bench-upsert`: a batch of upserts against append into tables of 1M, 10M and 50M rows
# (about 20 minutes).
bench: venv
	$(PY) bench/run.py

bench-backlog: venv
	$(PY) bench/run.py --sections backlog

bench-restart: venv
	$(PY) bench/job_start.py --starts 0 --node 3 --node-rounds 2

bench-upsert: venv
	$(PY) bench/upsert_growth.py --record

clean:
	rm -rf $(VENV) reports
