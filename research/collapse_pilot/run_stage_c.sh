#!/bin/bash
# Stage C, after Stage B, one worker, one thread (run from the repository root).
set -e
for s in stale_boundary lr_control; do
  /usr/bin/time -f "stage_c_$s wall %e s" .venv/bin/rl-lab sweep research/collapse_pilot/stage_c_$s.yaml --workers 1 --threads 1
done
