# The two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# make run: the services plus what runs them here (setup.cfg's `dev` extras: the
# embedded PostgreSQL and honcho), nothing of the test tools.
STAMP  := $(VENV)/.installed
# make test (and chaos): the test extras too (pytest, schemathesis, ...).
TEST_STAMP := $(VENV)/.installed-test
# make run-ha and test-scale: Patroni, in a virtualenv of its own on the system's
# Python: PostgreSQL refuses root, so Patroni runs as user postgres, who must be
# able to execute it (a Python under /root is not).
HA_VENV   := .venv-ha
HA_STAMP  := $(HA_VENV)/.installed
HA_PYTHON ?= $(firstword $(wildcard /usr/bin/python3) $(PYTHON))

.PHONY: run run-ha drill test test-scale clean bench chaos psql-platform psql-cluster

# The Debian packages each of test, test-scale and run-ha needs (tooling/packages.py, the
# one list; .ci/run gets them through make test and make test-scale): installed with
# apt-get when missing and make runs as root, else named, and make stops.
# `make packages-test PACKAGES_DRY_RUN=1` shows what a machine without them would run.
PACKAGE_TARGETS := packages-test packages-test-scale packages-run-ha packages-bench
.PHONY: $(PACKAGE_TARGETS)
$(PACKAGE_TARGETS):
	$(PYTHON) -m tooling.packages $(@:packages-%=%)

run: $(STAMP)
	$(BIN)/python -m tooling.devrun

# A psql shell on the database `make run` serves (its URL from .dev/env, without +psycopg2).
psql-platform: $(STAMP)
	$(BIN)/python -m tooling.psql PLATFORM_DATABASE_URL
psql-cluster: $(STAMP)
	$(BIN)/python -m tooling.psql CLUSTER_DATABASE_URL

# The production shape on this machine (docs/scale-out.md): etcd, two Patroni
# clusters, HAProxy, PgBouncer, 2 replicas of each service, 2 reconcilers.
# Installs the Debian packages it needs (as root) and Patroni; Ctrl-C stops it all.
run-ha: packages-run-ha $(STAMP) $(HA_STAMP)
	$(BIN)/python -m tooling.ha

# Every kill and failover of run-ha's topology under keyed load, one table (bench/drill.py;
# also written to drill.txt). About two minutes.
drill: packages-run-ha $(TEST_STAMP) $(HA_STAMP)
	$(BIN)/python -m bench.drill

# Patroni (PyPI) for run-ha and test-scale, in a virtualenv of its own on the
# system's Python (see HA_VENV above).
$(HA_STAMP):
	$(HA_PYTHON) -m venv $(HA_VENV)
	$(HA_VENV)/bin/python -m pip install --quiet 'patroni[etcd3]' psycopg2-binary
	touch $(HA_STAMP)

# On TEST_WORKERS processes (pytest-xdist; 0: this one only). --dist loadscope keeps a
# module's tests on one worker: they share its pair, and a chaos module's last test
# checks the databases every earlier one wrote to. --no-loadscope-reorder hands the
# modules out in tests/conftest.py's order, the long ones first (pytest-xdist would
# otherwise order them by their number of tests, and start the long ones last).
# 4 on 2 cores: the suite waits on its processes more than it computes (with 2 workers
# about 1.35 cores were busy; with 3 the e2e and chaos modules took 190 s instead of 231
# on a quiet machine, and as long as with 2 on a busy one; with 4 the whole suite took
# 255 s against 276 s with 3, one run each on the same quiet machine, 2026-11-27).
TEST_WORKERS ?= 4
test: packages-test $(TEST_STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder $(PYTEST_ARGS)

# The heavy process tests of the production shape (tests/scale: PgBouncer in
# transaction mode, several reconcilers, connections killed under the services),
# one at a time. `make test` leaves them out (tests/conftest.py): they are
# collected only when tests/scale is named, as here. They need Debian's pgbouncer,
# etcd-server and haproxy.
test-scale: packages-test-scale $(TEST_STAMP) $(HA_STAMP)
	$(BIN)/python -m pytest tests/scale $(PYTEST_ARGS)

# Reinstall whenever the dependencies change: one install per target. The test extras
# include the dev ones, so make test on a fresh clone resolves and installs everything
# at once (a second run cost it about 10 s).
# uv installs what pip would, from PyPI, resolving, downloading and unpacking in parallel: a
# fresh clone's install took 22 s with it against 78 s with pip (2026-12-02, one run each on
# a warm cache). The .pyc files are written at install time (--compile-bytecode), as pip
# does: this machine sets PYTHONDONTWRITEBYTECODE, so without them every process would
# compile every module it imports.
UV := $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Its own target, so that a .venv made before uv was used gets it too.
$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet 'uv>=0.9,<1'

# The clients are a distribution of their own (client/: idempotent-pair-client), which the
# services install beside them and send through. Editable in compat mode: a path in a
# .pth file, which mypy follows (setuptools' default import hook it does not).
EDITABLE := --config-settings editable_mode=compat
$(STAMP): setup.cfg pyproject.toml client/pyproject.toml | $(BIN)/uv
	$(UV) $(EDITABLE) -e './client[async]' -e '.[dev]'
	touch $(STAMP)

$(TEST_STAMP): setup.cfg pyproject.toml client/pyproject.toml | $(BIN)/uv
	$(UV) $(EDITABLE) -e './client[async]' -e '.[test]'
	touch $(STAMP) $(TEST_STAMP)

clean:
	rm -rf $(VENV) $(HA_VENV) .dev .dev-ha .pytest_cache .hypothesis

# Performance targets P1-P9 (docs/performance.md); BENCH_ARGS=--quick for a smoke run.
bench: packages-bench $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# The fault-injection scenarios (tests/chaos) at full size, and their table of figures;
# CHAOS_SEED=N replays a run.
chaos: $(TEST_STAMP)
	CHAOS_SCALE=full $(BIN)/python -m pytest tests/chaos -s $(PYTEST_ARGS)
