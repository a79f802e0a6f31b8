# txstore: the two commands a new machine needs.
#   make test   set up .venv (package + C extension + every extra the tests need), lint, type-check, test
#   make demo   the same set-up, then the main job
#   make docs   the documentation site (MkDocs Material + API reference) into site/, strictly
#   make bench  every benchmark in perf/ (--quick), with the bench extra (Quix Streams...)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.txstore-installed
# The tests need dev (pytest, mypy, ruff, build), spark, plot (the crash harness's chart) and
# docs (tests/test_docs_site.py builds the site).
EXTRAS ?= dev,spark,plot,docs,queries
PYTEST_ARGS ?=

.PHONY: setup test lint typecheck pytest demo docs bench bench-full clean

$(STAMP): pyproject.toml setup.py MANIFEST.in $(wildcard csrc/*.c csrc/*.h) csrc/build_ffi.py
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11+"; exit 1; }
	@command -v cc >/dev/null || command -v gcc >/dev/null || { echo "error: no C compiler (install build-essential / gcc)"; exit 1; }
	@echo "==> setting up $(VENV) (first run, or a build file changed; the next runs skip this)"
	@if test -x $(PY); then echo "==> reusing $(VENV) ($$($(PY) --version))"; \
	else echo "==> creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); fi
	@echo "==> upgrading pip and setuptools in $(VENV)"
	@$(PY) -m pip install -q --upgrade pip setuptools wheel
	@echo "==> installing txstore from this checkout: pip install -e '.[$(EXTRAS)]'"
	@echo "    (compiles the C codecs in csrc/, then installs the extras' packages; PySpark is large)"
	@# (the filter drops setuptools' 9-line notice, printed on every editable install)
	@PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q -e '.[$(EXTRAS)]'
	@touch $(STAMP)
	@echo "==> $(VENV) is ready"

setup: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check txstore pyspark_txstore tests perf csrc
	$(VENV)/bin/ruff format --check txstore pyspark_txstore tests perf csrc

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

test: lint typecheck pytest

demo: $(STAMP)
	$(PY) -m txstore demo

# mkdocs.yml: the pages of docs/ and the API reference generated from the docstrings; any
# warning (broken link or anchor, unknown cross-reference) fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

BENCHES ?= codecs kv window changelog restore queries spark check scale join reader_open page_walk \
	segment_check spark_pipeline

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[dev,spark,bench]'
	@for b in $(BENCHES); do echo "== perf/bench_$$b.py --quick"; $(PY) perf/bench_$$b.py --quick || exit 1; done

# Full sizes of every benchmark and the 1,000-kill crash-harness pass (~40 min); saves the
# outputs in perf/results/ and rewrites the table and chart of docs/performance.md.
bench-full: $(STAMP)
	$(PY) -m pip install -q -e '.[dev,spark,bench]'
	$(PY) perf/report.py --run $(shell echo $(BENCHES) | tr ' ' ','),crashtest

clean:
	rm -rf build dist *.egg-info txstore/_codecs*.so txstore/_codecs.c .pytest_cache .mypy_cache .ruff_cache
