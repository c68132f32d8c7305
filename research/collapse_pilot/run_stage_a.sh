#!/bin/bash
# Stage A, one spec after another, one worker, one thread (run from the repository root).
set -e
for s in none noise stale temp int8 minp; do
  /usr/bin/time -f "stage_a_$s wall %e s" .venv/bin/rl-lab sweep research/collapse_pilot/stage_a_$s.yaml --workers 1 --threads 1
done
