#!/usr/bin/env bash
# The GPU stability map (research/stability_map/map_gpu.yaml): run from the repository root on a
# machine with one CUDA GPU (`make setup` installs the CUDA torch there).  Resumable: re-run after
# a kill.  Step 1 builds the 30M scratchpad warm start if it is missing (a few minutes on a GPU).
set -euo pipefail
export RL_LAB_PRESET=gpu
ws=$(.venv/bin/python -c "from rl_lab.models import warm_start_path; print(warm_start_path('scratchpad', '30M'))")
if [ ! -f "$ws/model.safetensors" ]; then
  .venv/bin/python -m rl_lab.tools.warmstart --task scratchpad --size 30M --target 0.42 --threads "$(nproc)"   # CPU-only recipe
fi
t0=$(date +%s)
.venv/bin/rl-lab sweep research/stability_map/map_gpu.yaml --workers 1
echo "[map_gpu] $(( $(date +%s) - t0 )) s"
