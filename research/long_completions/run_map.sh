#!/usr/bin/env bash
# The long-completion map: run from the repository root.  One worker, one thread, in priority
# order; each spec is resumable (re-run after a kill).  Prints wall time per spec and copies each
# results.csv to research/long_completions/results/<name>/.
set -euo pipefail
for name in none bf16 noise stale2 none_lr1e-3; do
  spec=research/long_completions/map_${name}.yaml
  t0=$(date +%s)
  nice -n 5 .venv/bin/rl-lab sweep "$spec" --workers 1 --threads 1 --no-progress
  echo "[map] $spec: $(( $(date +%s) - t0 )) s"
  mkdir -p research/long_completions/results/$name
  cp runs/long_completions/$name/results.csv research/long_completions/results/$name/results.csv
done
