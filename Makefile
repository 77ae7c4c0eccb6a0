# `make demo` and `make test` set up everything they need on a fresh machine (Python 3.11,
# Java 17, and for the tests the PostgreSQL server on 127.0.0.1:5432, the MariaDB server on
# 127.0.0.1:3306 and NATS with JetStream on 127.0.0.1:4222). `make soak` needs the PostgreSQL
# and MariaDB server binaries only: it starts private servers of its own.
PYTHON ?= python3
VENV ?= .venv

.PHONY: demo test soak install

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

demo: install
	$(VENV)/bin/publisher demo

test: install
	$(VENV)/bin/pytest

SOAK_MINUTES ?= 10
SOAK_OPTIONS ?=

soak: install
	$(VENV)/bin/publisher soak --minutes $(SOAK_MINUTES) $(SOAK_OPTIONS)
