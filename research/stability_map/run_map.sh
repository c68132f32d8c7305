#!/usr/bin/env bash
# The laptop stability map: run from the repository root.  One worker, one thread; each spec is
# resumable (re-run this script after a kill).  Prints wall time per spec.
set -euo pipefail
for spec in research/stability_map/map_staleness_lr.yaml research/stability_map/map_corr_stale2_*.yaml; do
  t0=$(date +%s)
  .venv/bin/rl-lab sweep "$spec" --workers 1 --threads 1 --no-progress
  echo "[map] $spec: $(( $(date +%s) - t0 )) s"
done
