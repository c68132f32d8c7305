#!/bin/bash
# Stage A2, one spec after another, one worker, one thread (run from the repository root).
set -e
for s in none stale noise temp; do
  /usr/bin/time -f "stage_a2_$s wall %e s" .venv/bin/rl-lab sweep research/collapse_pilot/stage_a2_$s.yaml --workers 1 --threads 1
done
