#!/usr/bin/env bash
# The post's setting in miniature (NOTES.md, fixed before the runs).  Seed by seed, so that a cut
# (the budget in NOTES.md) drops whole seeds: for each seed the control's and the noise sampler's
# 2000-step runs, each spec's two output styles on two workers of one thread; then the bf16
# sampler's first 100 steps (question (a) only; the cut is in NOTES.md).  Resumable.
#   bash research/post_miniature/run.sh             # the first design (after the cut)
#   bash research/post_miniature/run.sh follow-up   # NOTES.md "Follow-up": bf16 and vLLM bf16, 2000 steps
set -euo pipefail
cd "$(dirname "$0")/../.."
run() {  # spec seed
    t0=$(date +%s)
    .venv/bin/python -c '
import sys
from rl_lab.tools.sweep import load_spec, run_sweep
spec = load_spec(f"research/post_miniature/{sys.argv[1]}.yaml")
spec["seeds"] = [int(sys.argv[2])]
run_sweep(spec, workers=2, threads=1, progress=False)
' "$1" "$2"
    echo "[post_miniature] seed $2, $1: $(( $(date +%s) - t0 )) s"
}
if [[ "${1:-}" == "follow-up" ]]; then
  for seed in ${SEEDS:-0 1 2}; do
    for spec in bf16 vllm_bf16; do
      run "$spec" "$seed"
    done
  done
  exit 0
fi
for seed in ${SEEDS:-0 1 2}; do
  for spec in control noise; do
    run "$spec" "$seed"
  done
done
for seed in ${SEEDS:-0 1 2}; do
  run bf16_first100 "$seed"
done

