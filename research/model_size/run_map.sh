#!/usr/bin/env bash
# The model-size map (research/model_size/NOTES.md): run from the repository root.  Builds the 3M
# addition warm start when it is missing (rl_lab/checkpoints/addition-3M, git-ignored; ~10 min on
# one core), then runs the specs in priority order, one worker, one thread.  Resumable: re-run after
# a kill.  Prints wall time per step.
set -euo pipefail
ws=$(.venv/bin/python -c "from rl_lab.models import warm_start_path; print(warm_start_path('addition', '3M'))")
if [ ! -f "$ws/model.safetensors" ]; then
  t0=$(date +%s)
  .venv/bin/python -m rl_lab.tools.warmstart --task addition --size 3M --learning-rate 1e-3 --steps 3000 --eval-every 10 --threads 1
  echo "[model_size] warm start: $(( $(date +%s) - t0 )) s"
fi
# Order changed after the first run (NOTES.md): the fresh sampler collapsed at lr 5e-4, so the
# lower learning rates run first, and bf16 runs at lr 1e-4 instead of 5e-4.
for spec in map_staleness_lr2e-4 map_staleness_lr1e-4 map_bf16_lr1e-4 map_staleness_lr5e-4; do
  t0=$(date +%s)
  .venv/bin/rl-lab sweep "research/model_size/$spec.yaml" --workers 1 --threads 1 --no-progress
  echo "[model_size] $spec: $(( $(date +%s) - t0 )) s"
done
