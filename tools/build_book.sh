#!/usr/bin/env bash
# Build the book (Jupyter Book 1) offline, executing every lab, and fail loudly.
#   bash tools/build_book.sh            # what `make book` runs
#   RL_LAB_PRESET=full bash tools/build_book.sh
#   bash tools/build_book.sh --builder dirhtml   # extra args go to `jupyter-book build`
# Output: _build/html/ (open _build/html/index.html). Log: _build/build_book.log.
# Works without activating the venv: it puts $VENV/bin first on PATH, so the `python3`
# kernelspec installed by `make setup` (--sys-prefix) and its `python` resolve to the venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-.venv}"
case "$VENV" in /*) VENV_ABS="$VENV" ;; *) VENV_ABS="$ROOT/$VENV" ;; esac
JB="$VENV_ABS/bin/jupyter-book"
PY="$VENV_ABS/bin/python"

t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }

if [[ ! -x "$JB" || ! -x "$PY" ]]; then
  echo "build_book: ERROR: $JB not found. Run \`make setup\` first (creates $VENV with the book toolchain)." >&2
  exit 1
fi

export PATH="$VENV_ABS/bin:$PATH"
export VIRTUAL_ENV="$VENV_ABS"
unset PYTHONHOME
export RL_LAB_PRESET="${RL_LAB_PRESET:-smoke}"
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export HF_DATASETS_OFFLINE=1
export PYDEVD_DISABLE_FILE_VALIDATION=1   # silence ipykernel's debugger warning on stderr
# Pages executed at once (Sphinx reads them in parallel, one page per process; the default is the
# CPUs this process may use, at most 4). Most of a smoke page's time is single-threaded Python (a
# kernel starting, imports, tiny tensors), so two pages at once on two cores take about half as
# long (BENCHMARKS.md, section 4); each kernel then
# gets one torch thread (a caller's OMP_NUM_THREADS wins). RL_LAB_BOOK_JOBS=1: one page at a time,
# with torch's spinning OpenMP threads, faster than rl_lab's passive default on otherwise idle
# cores (BENCHMARKS.md, section 9).
CALLER_OMP="${OMP_NUM_THREADS-unset}"
JOBS="${RL_LAB_BOOK_JOBS:-$("$PY" -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}"
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "build_book: RL_LAB_BOOK_JOBS must be a positive integer, got '$JOBS'" >&2; exit 2; }
if [[ "$JOBS" -gt 1 ]]; then
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
else
  export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-ACTIVE}"
fi
unset MPLBACKEND                          # let the kernel use the inline backend so figures are captured

# The HTML must load MathJax and the widget JS from _vendor/, never from a CDN.
if [[ ! -s _vendor/mathjax/tex-mml-chtml.js || ! -s _vendor/widgets/embed-amd.js ]]; then
  echo "build_book: _vendor/ is missing or incomplete; running tools/vendor_assets.sh"
  bash tools/vendor_assets.sh
fi

# The labs run in the `python3` kernel; make sure it is this venv's interpreter.
"$PY" - <<'EOF'
import os, shutil, sys
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
try:
    spec = KernelSpecManager().get_kernel_spec("python3")
except Exception as exc:  # noqa: BLE001
    sys.exit(f"build_book: ERROR: no `python3` kernelspec ({exc}); run `make setup`.")
cmd = KernelManager(kernel_name="python3").format_kernel_cmd()
exe = shutil.which(cmd[0]) or cmd[0]
venv = os.path.realpath(os.environ["VIRTUAL_ENV"])
if not os.path.realpath(exe).startswith(venv + os.sep) and os.path.realpath(os.path.dirname(exe)) != os.path.realpath(os.path.join(venv, "bin")):
    sys.exit(f"build_book: ERROR: kernel `python3` ({spec.resource_dir}) would run {exe}, not the venv at {venv}")
print(f"build_book: kernel python3 -> {exe}  (spec {spec.resource_dir})")
EOF

# Stale state: jupyter-cache ignores rl_lab changes, and old error reports would confuse.
rm -rf _build/.jupyter_cache _build/html/reports _build/jupyter_execute _build/labs_executed.json
mkdir -p _build
LOG="_build/build_book.log"

echo "build_book: RL_LAB_PRESET=$RL_LAB_PRESET; jupyter-book $("$JB" --version 2>/dev/null | head -1 | awk '{print $NF}')"
# --all: re-read (hence re-execute) every page even if Sphinx thinks it is unchanged; otherwise
# an incremental build would neither re-run labs after an rl_lab change nor re-emit their warnings.
set +e
echo "build_book: $JOBS page(s) at a time${OMP_NUM_THREADS:+, OMP_NUM_THREADS=$OMP_NUM_THREADS}"
# jupyter-book, with Sphinx executing $JOBS pages at a time (tools/jupyter_book_parallel.py).
RL_LAB_BOOK_JOBS="$JOBS" "$PY" tools/jupyter_book_parallel.py build . --all -W -n --keep-going "$@" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e

if [[ $rc -ne 0 ]]; then
  echo
  echo "build_book: FAILED (rc=$rc) after $(elapsed)s. Full log: $LOG"
  if [[ -d _build/html/reports ]]; then
    while IFS= read -r -d '' f; do
      echo "================ $f ================"
      cat "$f"
    done < <(find _build/html/reports -name '*.err.log' -print0 | sort -z)
  fi
  echo "build_book: warnings/errors from the log:"
  grep -E "WARNING|ERROR|Error|Traceback" "$LOG" | grep -v "Kernel is running over TCP" | head -50 || true
  exit "$rc"
fi

# The labs this build executed, and a fingerprint of what they ran on: `make test` skips them
# under nbval while nothing has changed (tools/lab_stamp.py).
# (Under the caller's OMP_NUM_THREADS: `make test` compares the stamp with its own environment, and
# its nbval kernels get one thread per process as the book's parallel kernels did.)
if [[ "$CALLER_OMP" == unset ]]; then
  env -u OMP_NUM_THREADS "$PY" tools/lab_stamp.py --record
else
  OMP_NUM_THREADS="$CALLER_OMP" "$PY" tools/lab_stamp.py --record
fi
echo "build_book: OK in $(elapsed)s -> _build/html/index.html"
