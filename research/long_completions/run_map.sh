#!/usr/bin/env bash
# The long-completion map, in the order it was run: from the repository root, one worker, one
# thread, one spec at a time.  Each spec is resumable (re-run after a kill: finished runs are
# skipped).  Prints wall time per spec and copies each results.csv to results/<name>/.
# The first version of this script ran none, bf16, then noise and stale 2 with both learning
# rates in one spec each; after the fp32 control collapsed 2/3 at lr 5e-4 (NOTES.md), it was
# stopped during bf16 and the specs were split by learning rate so the lr-2e-4 cells run first.
set -euo pipefail
for name in none bf16 noise_lr2e-4 stale2_lr2e-4 addition_bf16 stale2_lr5e-4 noise_lr5e-4 none_lr1e-3; do
  spec=research/long_completions/map_${name}.yaml
  t0=$(date +%s)
  nice -n 5 .venv/bin/rl-lab sweep "$spec" --workers 1 --threads 1 --no-progress
  echo "[map] $spec: $(( $(date +%s) - t0 )) s"
  mkdir -p research/long_completions/results/$name
  cp runs/long_completions/$name/results.csv research/long_completions/results/$name/results.csv
done
