#!/usr/bin/env bash
# The GPU stability map (research/stability_map/map_gpu.yaml): run from the repository root on a
# machine with one CUDA GPU (`make setup` installs the CUDA torch there).  Resumable: re-run after
# a kill.  Step 1 builds the 30M scratchpad warm start if it is missing (a few minutes on a GPU).
# On a machine without `make setup` (rl_lab not installed): PYTHON=python3 PYTHONPATH=. bash research/stability_map/run_map_gpu.sh
set -euo pipefail
export RL_LAB_PRESET=gpu
PY=${PYTHON:-.venv/bin/python}
ws=$("$PY" -c "from rl_lab.models import warm_start_path; print(warm_start_path('scratchpad', '30M'))")
if [ ! -f "$ws/model.safetensors" ]; then
  "$PY" -m rl_lab.tools.warmstart --task scratchpad --size 30M --target 0.42 --threads "$(nproc)"   # CPU-only recipe
fi
t0=$(date +%s)
"$PY" -m rl_lab.tools.cli sweep research/stability_map/map_gpu.yaml --workers 1
echo "[map_gpu] $(( $(date +%s) - t0 )) s"
