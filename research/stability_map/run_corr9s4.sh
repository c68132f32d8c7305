#!/usr/bin/env bash
# The nine-seed stale-4 bypass arm (NOTES.md, "Bypass at four stale steps on nine seeds").  Run from
# the repository root; resumable.  About 20 s a run on one thread.
set -euo pipefail
PY=${PY:-.venv/bin/python}
name=corr9s4_bypass_ppo_clip
nice -n 10 env OMP_NUM_THREADS=1 "$PY" -m rl_lab.tools.cli sweep "research/stability_map/map_$name.yaml" \
  --workers 1 --threads 1 --no-progress
mkdir -p "research/stability_map/results/$name"
cp "runs/stability_map/$name/results.csv" "runs/stability_map/$name/sweep.yaml" "research/stability_map/results/$name/"
"$PY" research/stability_map/clipfrac.py "runs/stability_map/$name" "research/stability_map/results/$name/clipfrac.csv"
