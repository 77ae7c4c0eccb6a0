# `make demo` and `make test` set up everything they need on a fresh machine (Python 3.11,
# Java 17, and for the tests the PostgreSQL server on 127.0.0.1:5432, the MariaDB server on
# 127.0.0.1:3306 and NATS with JetStream on 127.0.0.1:4222). `make soak` needs the PostgreSQL
# and MariaDB server binaries only: it starts private servers of its own.
PYTHON ?= python3
VENV ?= .venv

.PHONY: demo test test-fast soak install native

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

demo: install
	$(VENV)/bin/publisher demo

# PostgreSQL's native capture (`publisher install --native`): built against the server's headers
# and installed where the server loads libraries from, so it runs on the database server's host.
# Where the headers are missing and Debian's packages can be installed, it installs them first.
PG_CONFIG ?= pg_config
PG_MAJOR = $(shell $(PG_CONFIG) --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')

native:
	@test -f "$$($(PG_CONFIG) --includedir-server)/postgres.h" || apt-get install -y -q postgresql-server-dev-$(PG_MAJOR)
	$(MAKE) -C publisher/databases/postgresql/extension PG_CONFIG=$(PG_CONFIG) install

# Tests run on TEST_WORKERS processes (pytest-xdist), each on databases of its own (a test that
# stops a server starts a private one); a worker that runs out of tests takes pending ones from
# the other (worksteal), so a long test near the end does not leave one idle. `test-fast` runs the tests that need no database server,
# no Spark and no publisher process of their own.
TEST_WORKERS ?= 2
FAST = not database and not spark and not process

test: install native
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist worksteal

test-fast: install
	$(VENV)/bin/pytest -n $(TEST_WORKERS) -m "$(FAST)"

SOAK_MINUTES ?= 10
SOAK_OPTIONS ?=

soak: install
	$(VENV)/bin/publisher soak --minutes $(SOAK_MINUTES) $(SOAK_OPTIONS)
