#!/usr/bin/env bash
# Block 3 of the tool-task comparison (research/tool_methods/NOTES.md): run from the repository root.
# The teacher first (make_teacher.py), then one worker with one thread, arms in NOTES.md's order.
# Resumable: re-run after a kill.  Then: .venv/bin/python research/tool_methods/summarize.py --collect
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
test -f runs/tool_methods/teacher_ood/model.safetensors || \
  nice -n 10 .venv/bin/python research/tool_methods/make_teacher.py --out runs/tool_methods/teacher_ood
for arm in grpo skip_zero filter_groups empg_sum empg_scaled mask_void rl_sft teacher_kl; do
  t0=$(date +%s)
  nice -n 10 .venv/bin/rl-lab sweep "research/tool_methods/block3_$arm.yaml" --workers 1 --threads 1 --no-progress
  echo "[block3] $arm: $(( $(date +%s) - t0 )) s"
done
