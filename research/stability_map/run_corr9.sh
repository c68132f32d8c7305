#!/usr/bin/env bash
# The nine-seed comparison of the corrections (NOTES.md, "Nine against nine").  Run from the
# repository root; resumable.  WORKERS (default 1) processes of one thread each.
set -euo pipefail
for spec in research/stability_map/map_corr9_*.yaml; do
  t0=$(date +%s)
  .venv/bin/rl-lab sweep "$spec" --workers "${WORKERS:-1}" --threads 1 --no-progress
  echo "[corr9] $spec: $(( $(date +%s) - t0 )) s"
  name=$(basename "$spec" .yaml); name=${name#map_}
  mkdir -p "research/stability_map/results/$name"
  cp "runs/stability_map/$name/results.csv" "runs/stability_map/$name/sweep.yaml" "research/stability_map/results/$name/"
done
