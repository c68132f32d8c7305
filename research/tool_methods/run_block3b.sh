#!/usr/bin/env bash
# Block 3b (research/tool_methods/NOTES.md, issue 53): SimpleTIR as published, then the loss-only void mask alone;
# one worker, one thread, from the repository root.  Resumable.  Then: summarize.py --collect
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=${PY:-.venv/bin/python}
for arm in simpletir mask_void_loss; do
  t0=$(date +%s)
  nice -n 10 "$PY" -m rl_lab.tools.cli sweep "research/tool_methods/block3_$arm.yaml" --workers 1 --threads 1 --no-progress
  echo "[block3b] $arm: $(( $(date +%s) - t0 )) s"
done
