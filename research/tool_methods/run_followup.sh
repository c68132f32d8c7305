#!/usr/bin/env bash
# The follow-up of research/tool_methods/NOTES.md ("Follow-up"): OOD tool outputs, fresh seeds 4-11,
# plain GRPO, hybrid RL/IL and EMPG.  Run from the repository root; 1 worker, 1 thread; resumable.
# Then: .venv/bin/python research/tool_methods/summarize.py --collect
set -euo pipefail
for spec in followup_grpo followup_hybrid_il followup_empg; do
  t0=$(date +%s)
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 \
    .venv/bin/rl-lab sweep "research/tool_methods/$spec.yaml" --workers 1 --threads 1 --no-progress
  echo "[tool_methods] $spec: $(( $(date +%s) - t0 )) s"
done
