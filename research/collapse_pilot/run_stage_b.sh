#!/bin/bash
# Stage B, one spec after another, one worker, one thread (run from the repository root).
set -e
for s in token_tis seq_tis seq_mis geo_rs trm trm_published bypass_ppo_clip; do
  /usr/bin/time -f "stage_b_$s wall %e s" .venv/bin/rl-lab sweep research/collapse_pilot/stage_b_$s.yaml --workers 1 --threads 1
done
