#!/usr/bin/env bash
# The long-horizon cells (NOTES.md): one worker of one thread per spec, resumable; the results and
# each run's per-step k3/reward summary are copied into results/ by summarize.py --collect.
set -euo pipefail
for spec in research/long_horizon/staleness.yaml research/long_horizon/bf16.yaml; do
  t0=$(date +%s)
  .venv/bin/rl-lab sweep "$spec" --workers "${WORKERS:-1}" --threads 1 --no-progress
  echo "[long_horizon] $spec: $(( $(date +%s) - t0 )) s"
done
