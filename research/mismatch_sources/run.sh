#!/usr/bin/env bash
# The source-by-source study (NOTES.md, pre-registered).  From the repository root; resumable.
#   bash research/mismatch_sources/run.sh s1      # stage 1 (or s2, s3, s4, s5); WORKERS (default 2) x 1 thread
set -euo pipefail
stage="${1:?usage: run.sh s1|s2|s3|s4|s5}"
for spec in research/mismatch_sources/specs/"$stage"_*.yaml; do
  t0=$(date +%s)
  .venv/bin/rl-lab sweep "$spec" --workers "${WORKERS:-2}" --threads 1 --no-progress
  name=$(basename "$spec" .yaml)
  echo "[sources] $name: $(( $(date +%s) - t0 )) s"
  mkdir -p "research/mismatch_sources/results/$name"
  cp "runs/mismatch_sources/$name/results.csv" "runs/mismatch_sources/$name/sweep.yaml" "research/mismatch_sources/results/$name/"
done
