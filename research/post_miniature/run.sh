#!/usr/bin/env bash
# The post's setting in miniature (NOTES.md, fixed before the runs).  Seed by seed, so that a cut
# (the budget in NOTES.md) drops whole seeds: for each seed, the three samplers' specs, each with
# its two output styles on two workers of one thread.  Resumable (rl-lab sweep's rules).
set -euo pipefail
cd "$(dirname "$0")/../.."
for seed in ${SEEDS:-0 1 2}; do
  for spec in control bf16 noise; do
    t0=$(date +%s)
    .venv/bin/python -c '
import sys
from rl_lab.sweep import load_spec, run_sweep
spec = load_spec(f"research/post_miniature/{sys.argv[1]}.yaml")
spec["seeds"] = [int(sys.argv[2])]
run_sweep(spec, workers=2, threads=1, progress=False)
' "$spec" "$seed"
    echo "[post_miniature] seed $seed, $spec: $(( $(date +%s) - t0 )) s"
  done
done
